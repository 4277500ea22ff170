package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestLeaderKeepsItsOwnPlace: the leader of a FairMutex's waiters, whose
// lock key shows whether the lock is held, renews its own place in its
// keep and does not attempt while the lock stays held: one call per
// refresh for the whole group.
func TestLeaderKeepsItsOwnPlace(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	k := placeKinds[0] // FairMutex
	name := "places-leader-keeps-itself"
	release := holdFromAnotherClient(t, srv, k, name)
	const n = 4
	// A refresh of a second, so that followers asking for themselves
	// (a keep half a refresh late) stay rare on a loaded machine.
	w := startPlaceWaitersLeased(t, srv, k, name, n, 3*time.Second)
	queue := k.queue(w.c, name)
	w.waitKept(t, queue, 1, 1)
	calls, keeps := w.counter.n.Load(), w.counter.keeps.Load()
	const rounds = 6
	w.waitKept(t, queue, 1, rounds)
	keeps = w.counter.keeps.Load() - keeps
	attempts := w.counter.n.Load() - calls - keeps
	t.Logf("%d rounds of keeps: %d keeps, %d other script calls", rounds, keeps, attempts)
	// An attempt per round besides the keep would be rounds.
	if attempts > rounds/2 {
		t.Errorf("%d script calls other than keeps in %d rounds; want at most %d", attempts, rounds, rounds/2)
	}
	release()
	w.wantArrivalOrder(t, 0, n)
}

// TestLeaderSeesALockFreedSilently: a FairMutex's key that goes without a
// release (a holder dead, a grant's claim window lapsed) publishes nothing;
// the leader's keep reads it gone and the leader attempts, well before the
// holder's TTL it last saw would run out.
func TestLeaderSeesALockFreedSilently(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	k := placeKinds[0] // FairMutex
	name := "places-freed-silently"
	holder, err := New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close() })
	l, err := holder.FairMutex(name, WithTTL(5*time.Minute), WithAutoRenew(false)).Lock(placeTestCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	w := startPlaceWaiters(t, srv, k, name, n)
	queue := k.queue(w.c, name)
	w.waitKept(t, queue, 1, 1)
	srv.Do(t, "DEL", holder.FairMutex(name).m.keys.lock)
	select {
	case i := <-w.order:
		if i != 0 {
			t.Fatalf("waiter %d granted first; want 0", i)
		}
	case <-time.After(time.Minute):
		t.Fatal("no waiter granted within a minute of the lock's key going; the holder's TTL was 5 minutes")
	}
	w.wantArrivalOrder(t, 1, n-1)
	if err := l.Unlock(context.Background()); err == nil {
		t.Error("the holder whose key was deleted released without an error")
	}
}
