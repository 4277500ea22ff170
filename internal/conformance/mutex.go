package conformance

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// testListKeyConflicts: GET on a list raises WRONGTYPE inside the script,
// which the driver must pass on as a reply error the core recognizes.
func testListKeyConflicts(t *testing.T, newClient NewClientFunc) {
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	rdb := inspector(t, srv)
	name := lockName(t)
	ctx := testCtx(t)
	own(t, rdb, lockKey(name))
	rdb.RPush(ctx, lockKey(name), "a", "b")

	start := time.Now()
	if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Errorf("TryLock on a list: got %v, want ErrKeyConflict", err)
	}
	if _, err := c.Mutex(name).Lock(ctx); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Errorf("Lock on a list: got %v, want ErrKeyConflict", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v to report the conflicts; want at once", d)
	}
	if n := rdb.LLen(ctx, lockKey(name)).Val(); n != 2 {
		t.Errorf("the list was modified: length %d", n)
	}
	if d := rdb.PTTL(ctx, lockKey(name)).Val(); d != -1 {
		t.Errorf("the list got an expiry: %v", d)
	}
}

// testForeignStringConflicts: the acquire script answers a string without
// expiry with its own error reply, which must reach the core intact.
func testForeignStringConflicts(t *testing.T, newClient NewClientFunc) {
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	rdb := inspector(t, srv)
	name := lockName(t)
	ctx := testCtx(t)
	own(t, rdb, lockKey(name))
	rdb.Set(ctx, lockKey(name), "someone-else", 0)

	start := time.Now()
	if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Errorf("TryLock: got %v, want ErrKeyConflict", err)
	}
	if _, err := c.Mutex(name).Lock(ctx); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Errorf("Lock: got %v, want ErrKeyConflict", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v to report the conflicts; want at once", d)
	}
	if v := rdb.Get(ctx, lockKey(name)).Val(); v != "someone-else" {
		t.Errorf("the foreign value was changed to %q", v)
	}
	if n := rdb.Exists(ctx, lockKey(name)+":q").Val(); n != 0 {
		t.Errorf("a waiter was queued behind the foreign key")
	}
}

// testScriptFlushIsTransparent flushes the script cache before each kind of
// call, as a restart or failover would: single calls, a hand-off to a
// waiter, and the watchdog's renewals (pipelined when several leases are due
// together) must all fall back to EVAL.
func testScriptFlushIsTransparent(t *testing.T, newClient NewClientFunc) {
	srv := redistest.Start(t) // SCRIPT FLUSH would slow the shared server's other users
	const ttl = time.Second
	a := newClient(t, srv, dlock.WithTTL(ttl))
	b := newClient(t, srv, dlock.WithTTL(ttl))
	rdb := inspector(t, srv)
	name := lockName(t)
	ctx := testCtx(t)

	for i := 0; i < 2; i++ {
		srv.FlushScripts(t)
		lease, err := a.Mutex(name).TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock after SCRIPT FLUSH: %v", err)
		}
		srv.FlushScripts(t)
		if err := lease.Extend(ctx, 3*time.Second); err != nil {
			t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
		}
		srv.FlushScripts(t)
		if d, err := lease.TTL(ctx); err != nil || d <= 0 {
			t.Fatalf("TTL after SCRIPT FLUSH: %v, %v", d, err)
		}
		srv.FlushScripts(t)
		mustUnlock(t, lease)
	}

	held := mustLock(t, a, name)
	got := lockAsync(ctx, b.Mutex(name))
	waitQueued(t, rdb, name, 1)
	srv.FlushScripts(t)
	mustUnlock(t, held)
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter after SCRIPT FLUSH: %v", r.err)
	}
	mustUnlock(t, r.lease)

	var leases []*dlock.Lease
	for i := 0; i < 3; i++ {
		leases = append(leases, mustLock(t, a, lockName(t, ":renewed-", strconv.Itoa(i))))
	}
	srv.FlushScripts(t)
	// Not synchronization: the time under test. Without renewals after the
	// flush every key would have expired by now.
	time.Sleep(ttl + ttl/2)
	for _, l := range leases {
		if err := l.Err(); err != nil {
			t.Errorf("lease %q lost across SCRIPT FLUSH: %v", l.Name(), err)
		}
		if n := rdb.Exists(ctx, lockKey(l.Name())).Val(); n != 1 {
			t.Errorf("key of %q expired: it was not renewed after SCRIPT FLUSH", l.Name())
		}
		mustUnlock(t, l)
	}
}

func testFencingTokensIncrease(t *testing.T, newClient NewClientFunc) {
	srv := redistest.Shared(t)
	clients := []*dlock.Client{newClient(t, srv), newClient(t, srv)}
	rdb := inspector(t, srv)
	name := lockName(t)
	ctx := testCtx(t)
	var last int64
	for i := 0; i < 10; i++ {
		if i == 5 {
			rdb.Del(ctx, lockKey(name)+":fence") // as if the counter had expired
		}
		lease, err := clients[i%2].Mutex(name).TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock %d: %v", i, err)
		}
		if lease.Token() <= last {
			t.Fatalf("token %d after %d", lease.Token(), last)
		}
		last = lease.Token()
		mustUnlock(t, lease)
	}
}

// testMutualExclusionAcrossClients runs a non-atomic read-modify-write of a
// Redis counter from several Clients with their own pools, as separate
// processes would: any overlap loses an update.
func testMutualExclusionAcrossClients(t *testing.T, newClient NewClientFunc) {
	srv := redistest.Shared(t)
	const clients, workers, rounds = 3, 3, 8
	rdb := inspector(t, srv)
	name := lockName(t)
	counterKey := "counter:" + name
	ctx := testCtx(t)
	own(t, rdb, counterKey)

	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		c := newClient(t, srv, dlock.WithTTL(5*time.Second))
		for j := 0; j < workers; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < rounds; r++ {
					lease, err := c.Mutex(name).Lock(ctx)
					if err != nil {
						t.Errorf("Lock: %v", err)
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					n, err := rdb.Get(ctx, counterKey).Int()
					if err != nil && !errors.Is(err, redis.Nil) {
						t.Errorf("GET: %v", err)
					}
					time.Sleep(100 * time.Microsecond) // widen the race window
					rdb.Set(ctx, counterKey, n+1, time.Minute)
					inside.Add(-1)
					if err := lease.Unlock(ctx); err != nil {
						t.Errorf("Unlock: %v", err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if got, want := rdb.Get(ctx, counterKey).Val(), strconv.Itoa(clients*workers*rounds); got != want {
		t.Errorf("counter = %s, want %s: updates were lost", got, want)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d critical sections overlapped", n)
	}
	if n := leftovers(t, rdb, name); n != 0 {
		t.Errorf("%d lock keys left behind", n)
	}
}
