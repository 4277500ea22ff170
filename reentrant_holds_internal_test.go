package dlock

import (
	"context"
	"testing"

	"github.com/dlock-go/dlock/internal/protocol"
)

// An acquire sent again after its reply was lost finds the lone hold it
// took (recorded by the lock's key alone) and counts it once: one release
// frees the lock.
func TestReentrantLoneHoldAcquiredTwiceCountsOnce(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	ctx := WithOwner(context.Background(), "job")
	m := c.ReentrantMutex(t.Name())
	owner, err := m.owner(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := &reentrantHold{m: m, owner: owner}
	member, err := h.newPlace()
	if err != nil {
		t.Fatal(err)
	}
	var tokens [2]int64
	for i := range tokens {
		a, err := protocol.ReentrantAcquire(ctx, c.drv, m.all[:], member, &m.cfg.pxMillis,
			protocol.Join(false), protocol.LockMode(c.drv, false), &m.cfg.timings, m.cfg.ack())
		if err != nil || !a.Granted {
			t.Fatalf("acquire %d: granted %v, %v", i+1, a.Granted, err)
		}
		if a.Grant != "" && a.Grant != h.hold {
			t.Errorf("acquire %d names grant %q, want this hold's %q", i+1, a.Grant, h.hold)
		}
		tokens[i] = a.Fence
	}
	if tokens[0] != tokens[1] {
		t.Errorf("the acquire sent again reports token %d, the grant's is %d", tokens[1], tokens[0])
	}
	if n, err := m.HoldCount(ctx); err != nil || n != 1 {
		t.Fatalf("HoldCount = %d, %v; want 1", n, err)
	}
	if ended, err := h.sendRelease(ctx, member); !ended || err != nil {
		t.Fatalf("release: ended %v, %v", ended, err)
	}
	if n, err := m.HoldCount(ctx); err != nil || n != 0 {
		t.Fatalf("HoldCount after the one release = %d, %v; want 0", n, err)
	}
}
