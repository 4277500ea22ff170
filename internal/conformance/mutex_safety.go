package conformance

import (
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
