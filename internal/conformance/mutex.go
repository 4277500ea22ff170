package conformance

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

var mutexTests = []test{
	{"TryLockExcludesOtherOwners", testTryLockExcludesOtherOwners},
	{"LockSetsOwnerValueWithTTL", testLockSetsOwnerValueWithTTL},
	{"HandOffToWaiterIsPrompt", testHandOffToWaiterIsPrompt},
	{"WaitersServedInArrivalOrder", testWaitersServedInArrivalOrder},
	{"CancelledWaitLeavesNothingQueued", testCancelledWaitLeavesNothingQueued},
	{"LockDeadline", testLockDeadline},
	{"ListKeyConflicts", testListKeyConflicts},
	{"ForeignStringConflicts", testForeignStringConflicts},
	{"ScriptFlushIsTransparent", testScriptFlushIsTransparent},
	{"FencingTokensIncrease", testFencingTokensIncrease},
	{"MutualExclusionAcrossClients", testMutualExclusionAcrossClients},
}

func testTryLockExcludesOtherOwners(t *testing.T, newClient NewClientFunc) {
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv)
	rdb := inspector(t, srv)
	name := lockName(t)
	ctx := testCtx(t)

	lease, err := a.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("first TryLock: %v", err)
	}
	if _, err := b.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock by another client: got %v, want ErrNotObtained", err)
	}
	if _, err := a.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock by another owner on the same client: got %v, want ErrNotObtained", err)
	}
	mustUnlock(t, lease)
	if n := leftovers(t, rdb, name); n != 0 {
		t.Errorf("%d keys left after Unlock", n)
	}
	lease2, err := b.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after Unlock: %v", err)
	}
	if lease2.Token() <= lease.Token() {
		t.Errorf("fencing token did not increase: %d then %d", lease.Token(), lease2.Token())
	}
	mustUnlock(t, lease2)
}

func testLockSetsOwnerValueWithTTL(t *testing.T, newClient NewClientFunc) {
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(10*time.Second), dlock.WithOwnerInfo("conformance"))
	rdb := inspector(t, srv)
	name := lockName(t)
	ctx := testCtx(t)
	lease := mustLock(t, c, name)
	defer mustUnlock(t, lease)

	if got := lease.Name(); got != name {
		t.Errorf("Name() = %q, want %q", got, name)
	}
	if err := lease.Err(); err != nil {
		t.Errorf("Err() of a held lease = %v", err)
	}
	val := rdb.Get(ctx, lockKey(name)).Val()
	if suffix := ";conformance"; len(val) != 32+len(suffix) || val[32:] != suffix {
		t.Errorf("lock value %q: want 32 hex digits then %q", val, suffix)
	}
	if pttl := rdb.PTTL(ctx, lockKey(name)).Val(); pttl <= 9*time.Second || pttl > 10*time.Second {
		t.Errorf("PTTL %v, want about 10s", pttl)
	}
	if d, err := lease.TTL(ctx); err != nil || d <= 9*time.Second || d > 10*time.Second {
		t.Errorf("TTL() = %v, %v; want about 10s", d, err)
	}
}

// testHandOffToWaiterIsPrompt passes the lock back and forth between two
// clients. Waiters poll only every WithWaiterLease/3, 10s here: a waiter that
// has the lock within 1s of the release heard the grant by pub/sub.
func testHandOffToWaiterIsPrompt(t *testing.T, newClient NewClientFunc) {
	srv := redistest.Shared(t)
	opt := dlock.WithWaiterLease(30 * time.Second)
	clients := []*dlock.Client{newClient(t, srv, opt), newClient(t, srv, opt)}
	rdb := inspector(t, srv)
	name := lockName(t)
	ctx := testCtx(t)

	held := mustLock(t, clients[0], name)
	for round := 1; round <= 3; round++ {
		got := lockAsync(ctx, clients[round%2].Mutex(name))
		waitQueued(t, rdb, name, 1)
		released := time.Now()
		mustUnlock(t, held)
		var r lockResult
		select {
		case r = <-got:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the waiter never got the lock", round)
		}
		if r.err != nil {
			t.Fatalf("round %d: waiting Lock: %v", round, r.err)
		}
		if d := r.at.Sub(released); d > time.Second {
			t.Errorf("round %d: the waiter got the lock %v after the release; want a few ms (was the grant's message missed?)", round, d)
		}
		if r.lease.Token() <= held.Token() {
			t.Errorf("round %d: token after the hand-off %d is not above %d", round, r.lease.Token(), held.Token())
		}
		held = r.lease
	}
	mustUnlock(t, held)
	if n := leftovers(t, rdb, name); n != 0 {
		t.Errorf("%d keys left after the last Unlock", n)
	}
}

func testWaitersServedInArrivalOrder(t *testing.T, newClient NewClientFunc) {
	srv := redistest.Shared(t)
	rdb := inspector(t, srv)
	name := lockName(t)
	ctx := testCtx(t)
	held := mustLock(t, newClient(t, srv), name)

	const n = 3
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		c := newClient(t, srv)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			l, err := c.Mutex(name).Lock(ctx)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- i
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("waiter %d: Unlock: %v", i, err)
			}
		}(i)
		waitQueued(t, rdb, name, int64(i+1)) // one after another
	}
	mustUnlock(t, held)
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Errorf("waiter %d got the lock in turn %d", got, want)
		}
		want++
	}
	if want != n {
		t.Errorf("%d of %d waiters got the lock", want, n)
	}
}

func testCancelledWaitLeavesNothingQueued(t *testing.T, newClient NewClientFunc) {
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv)
	rdb := inspector(t, srv)
	name := lockName(t)
	held := mustLock(t, a, name)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := lockAsync(ctx, b.Mutex(name))
	waitQueued(t, rdb, name, 1)
	cancel()
	r := <-got
	if !errors.Is(r.err, dlock.ErrNotObtained) || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled Lock: got %v, want ErrNotObtained and context.Canceled", r.err)
	}
	k := lockKey(name)
	waitFor(t, 5*time.Second, func() bool {
		return rdb.Exists(context.Background(), k+":q", k+":w").Val() == 0
	}, "the cancelled waiter to leave the queue")
	mustUnlock(t, held)
	if n := leftovers(t, rdb, name); n != 0 {
		t.Errorf("%d keys left: the lock was handed to the cancelled waiter", n)
	}
}

func testLockDeadline(t *testing.T, newClient NewClientFunc) {
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv)
	name := lockName(t)
	held := mustLock(t, a, name)
	defer mustUnlock(t, held)

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.Mutex(name).Lock(ctx)
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrNotObtained and context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Lock returned %v after its 150ms deadline", d)
	}
}
