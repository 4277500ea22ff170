package dlock_test

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// Waiters' WaitedFor comes from the server's clock (their arrival in the
// queue), is ordered as the queue is, and grows while they wait.
func TestInspectWaitedForGrows(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := uniqueName(t)
	c := newClient(t, srv)
	l := mustLock(t, c, name)
	defer l.Unlock(testCtx(t))
	goLock(t, newClient(t, srv, dlock.WithOwnerInfo("w1")).Mutex(name).Lock)
	waitWaiters(t, c, name, dlock.KindMutex, 1)
	goLock(t, newClient(t, srv, dlock.WithOwnerInfo("w2")).Mutex(name).Lock)
	waitWaiters(t, c, name, dlock.KindMutex, 2)

	inspect := func() dlock.LockInfo {
		t.Helper()
		infos, err := c.Inspect(testCtx(t), name)
		if err != nil {
			t.Fatalf("Inspect(%q): %v", name, err)
		}
		return infoOf(t, infos, dlock.KindMutex)
	}
	first := inspect()
	if w := first.Waiters; len(w) != 2 || w[0].WaitedFor < w[1].WaitedFor || w[1].WaitedFor < 0 || w[0].WaitedFor > time.Minute {
		t.Fatalf("waiters %+v: want two, the first waiting longer, within a minute", w)
	}
	waitFor(t, 10*time.Second, func() bool {
		now := inspect()
		return len(now.Waiters) == 2 &&
			now.Waiters[0].WaitedFor > first.Waiters[0].WaitedFor &&
			now.Waiters[1].WaitedFor > first.Waiters[1].WaitedFor
	}, "waited-for times that grow")
}
