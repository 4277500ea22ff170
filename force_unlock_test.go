package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestForceUnlockHandsTheLockToTheFirstWaiter(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := uniqueName(t)
	ctx := testCtx(t)
	holder := newClient(t, srv, dlock.WithOwnerInfo("holder"), dlock.WithTTL(600*time.Millisecond))
	l := mustLock(t, holder, name)
	first := goLock(t, newClient(t, srv, dlock.WithOwnerInfo("first")).Mutex(name).Lock)
	op := newClient(t, srv)
	waitWaiters(t, op, name, dlock.KindMutex, 1)
	second := goLock(t, newClient(t, srv, dlock.WithOwnerInfo("second")).Mutex(name).Lock)
	waitWaiters(t, op, name, dlock.KindMutex, 2)

	n, err := op.ForceUnlock(ctx, name)
	if n != 1 || err != nil {
		t.Fatalf("ForceUnlock = %d, %v; want 1, nil", n, err)
	}
	fl := first.await(t, 10*time.Second, "the first waiter after ForceUnlock")
	if fl.Token() <= l.Token() {
		t.Errorf("the first waiter's token %d is not above the holder's %d", fl.Token(), l.Token())
	}
	info := infoOf(t, mustInspect(t, op, name), dlock.KindMutex)
	if len(info.Holders) != 1 || info.Holders[0].Info != "first" || len(info.Waiters) != 1 || info.Waiters[0].Info != "second" {
		t.Errorf("after ForceUnlock: %+v, want first holding and second waiting", info)
	}
	if !second.pending() {
		t.Errorf("the second waiter returned while the first holds the lock")
	}

	// The former holder hears of it at its next renewal.
	waitDone(t, l, 10*time.Second)
	if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("the former holder's Err = %v, want ErrLockLost", err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the former holder's Unlock = %v, want ErrNotHeld", err)
	}
	if info := infoOf(t, mustInspect(t, op, name), dlock.KindMutex); len(info.Holders) != 1 || info.Holders[0].Info != "first" {
		t.Errorf("the former holder's Unlock changed the lock: %+v", info)
	}
}

// TestForceUnlockEveryKind: ForceUnlock releases the holders of every kind
// under one name, each of which learns of its loss, and hands each lock to
// its waiters in order; a latch of the name is left alone.
func TestForceUnlockEveryKind(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := uniqueName(t)
	ctx := testCtx(t)
	holder := newClient(t, srv, dlock.WithOwnerInfo("holder"), dlock.WithTTL(600*time.Millisecond))
	waiter := newClient(t, srv, dlock.WithOwnerInfo("waiter"))
	op := newClient(t, srv)

	former, reWaiter := holdReentrantAndWait(t, holder, waiter, op, name)
	readers, rwWaiter := holdReadersAndWait(t, holder, waiter, op, name)
	former = append(former, readers...)
	permits, semWaiters := holdPermitsAndWait(t, srv, holder, op, name)
	// A latch holds nothing and is left alone.
	if _, err := op.Latch(name).TrySetCount(ctx, 5); err != nil {
		t.Fatal(err)
	}

	n, err := op.ForceUnlock(ctx, name)
	if n != 5 || err != nil {
		t.Fatalf("ForceUnlock = %d, %v; want 5 holders released (1 reentrant owner, 2 readers, 2 semaphore holders)", n, err)
	}
	reWaiter.await(t, 10*time.Second, "the reentrant waiter")
	rwWaiter.await(t, 10*time.Second, "the writer")
	if p := semWaiters[0].await(t, 10*time.Second, "the first semaphore waiter"); p.N() != 2 {
		t.Errorf("the first semaphore waiter got %d permits", p.N())
	}
	sem := infoOf(t, mustInspect(t, op, name), dlock.KindSemaphore)
	if len(sem.Holders) != 1 || sem.Holders[0].Info != "sem-waiter-1" || len(sem.Waiters) != 2 ||
		sem.Waiters[0].Info != "sem-waiter-2" || sem.Waiters[1].Info != "sem-waiter-3" {
		t.Errorf("semaphore after ForceUnlock: %+v, want sem-waiter-1 holding, 2 and 3 waiting in order", sem)
	}
	for _, l := range former {
		waitDone(t, l, 10*time.Second)
		if !errors.Is(l.Err(), dlock.ErrLockLost) {
			t.Errorf("a former holder of %q: Err = %v, want ErrLockLost", l.Name(), l.Err())
		}
	}
	for _, p := range permits {
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("former permits still not done")
		}
		if !errors.Is(p.Err(), dlock.ErrLockLost) {
			t.Errorf("former permits: Err = %v, want ErrLockLost", p.Err())
		}
	}
	if n, err := op.Latch(name).Count(ctx); n != 5 || err != nil {
		t.Errorf("latch count = %d, %v after ForceUnlock; want 5", n, err)
	}
}

// holdReentrantAndWait gives one owner of holder two holds of name's
// ReentrantMutex, and queues an owner of waiter behind it.
func holdReentrantAndWait(t *testing.T, holder, waiter, op *dlock.Client, name string) ([]*dlock.Lease, *async[*dlock.Lease]) {
	t.Helper()
	rctx := dlock.WithOwner(testCtx(t), "job")
	var holds []*dlock.Lease
	for i := 0; i < 2; i++ {
		l, err := holder.ReentrantMutex(name).Lock(rctx)
		if err != nil {
			t.Fatal(err)
		}
		holds = append(holds, l)
	}
	w := goLock(t, func(ctx context.Context) (*dlock.Lease, error) {
		return waiter.ReentrantMutex(name).Lock(dlock.WithOwner(ctx, "other-job"))
	})
	waitWaiters(t, op, name, dlock.KindReentrant, 1)
	return holds, w
}

// holdReadersAndWait read-locks name's RWMutex twice through holder, and
// queues a writer of waiter behind them.
func holdReadersAndWait(t *testing.T, holder, waiter, op *dlock.Client, name string) ([]*dlock.Lease, *async[*dlock.Lease]) {
	t.Helper()
	var readers []*dlock.Lease
	for i := 0; i < 2; i++ {
		r, err := holder.RWMutex(name).RLock(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	w := goLock(t, waiter.RWMutex(name).Lock)
	waitWaiters(t, op, name, dlock.KindRWMutex, 1)
	return readers, w
}

// holdPermitsAndWait takes 2 + 1 of the 3 permits of name's Semaphore
// through holder, and queues waiters for 2, 2 and 1 on Clients of their
// own, served strictly in order: a release must grant the first one only,
// neither drop the large requests (a limit too low) nor grant the others
// (too high).
func holdPermitsAndWait(t *testing.T, srv *redistest.Server, holder, op *dlock.Client, name string) ([]*dlock.Permits, []*async[*dlock.Permits]) {
	t.Helper()
	var permits []*dlock.Permits
	for _, n := range []int{2, 1} {
		p, err := holder.Semaphore(name, 3).Acquire(testCtx(t), n)
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, p)
	}
	var waiters []*async[*dlock.Permits]
	for i, n := range []int{2, 2, 1} {
		w := newClient(t, srv, dlock.WithOwnerInfo(fmt.Sprintf("sem-waiter-%d", i+1)))
		waiters = append(waiters, goAcquire(t, func(ctx context.Context) (*dlock.Permits, error) {
			return w.Semaphore(name, 3).Acquire(ctx, n)
		}, releasePermits))
		waitWaiters(t, op, name, dlock.KindSemaphore, i+1)
	}
	return permits, waiters
}

func TestForceUnlockWithNothingHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := uniqueName(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	if n, err := c.ForceUnlock(ctx, name); n != 0 || err != nil {
		t.Errorf("ForceUnlock of an unknown name = %d, %v; want 0, nil", n, err)
	}
	unlockLease(mustLock(t, c, name))
	if n, err := c.ForceUnlock(ctx, name); n != 0 || err != nil {
		t.Errorf("ForceUnlock of a released lock = %d, %v; want 0, nil", n, err)
	}
}
