package dlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestReentrantHoldsShareOneWatchedLease(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	ctx := WithOwner(context.Background(), "job")
	m := c.ReentrantMutex(t.Name())
	var leases []*Lease
	for i := 0; i < 5; i++ {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	if n := c.watched(); n != 1 {
		t.Errorf("the watchdog watches %d leases for one owner's 5 holds, want 1", n)
	}
	for _, l := range leases {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.watched(); n != 0 {
		t.Errorf("the watchdog still watches %d leases after every hold was unlocked", n)
	}
}

// watched is how many leases the watchdog watches.
func (c *Client) watched() int {
	return c.wd.Counts().Leases
}

// An owner's holds hang on its anchor's lease as nested holds, not as loss
// callbacks: the Watchdog keeps no callback per hold, however many come and
// go, and the anchor's loss still reaches each of them.
func TestReentrantHoldsNestWithoutLossCallbacks(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	ctx := WithOwner(context.Background(), "job")
	m := c.ReentrantMutex(t.Name())
	var leases []*Lease
	for i := 0; i < 3; i++ {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	if n := c.wd.Counts().LossFuncs; n != 0 {
		t.Errorf("the Watchdog keeps %d loss callbacks for one owner's 3 holds, want 0", n)
	}
	if n := c.anchors.count(); n != 1 {
		t.Errorf("%d anchors for one owner's holds, want 1", n)
	}
	leases[0].s.SetValidUntil(time.Now().Add(-time.Millisecond)) // as after a long pause
	for i, l := range leases {
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("hold %d: Done still open 10 s after the anchor's deadline", i)
		}
		if err := l.Err(); !errors.Is(err, ErrLockLost) {
			t.Errorf("hold %d: Err = %v, want ErrLockLost", i, err)
		}
	}
	for _, l := range leases {
		_ = l.Unlock(ctx) // the lock is still there: released by the owner's last hold
	}
	if n := c.anchors.count(); n != 0 {
		t.Errorf("%d anchors left after every hold was unlocked", n)
	}
}
