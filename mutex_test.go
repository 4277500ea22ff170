package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestTryLockExcludesOtherOwners(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv)
	name := t.Name()
	ctx := testCtx(t)

	lease, err := a.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("first TryLock: %v", err)
	}
	_, err = b.Mutex(name).TryLock(ctx)
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("second TryLock: got %v, want ErrNotObtained", err)
	}
	// The same client, another owner: also refused.
	if _, err := a.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock by another owner on the same client: got %v, want ErrNotObtained", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	lease2, err := b.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after Unlock: %v", err)
	}
	if lease2.Token() <= lease.Token() {
		t.Errorf("fencing token did not increase: %d then %d", lease.Token(), lease2.Token())
	}
	if err := lease2.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if n := srv.Client(t).Exists(ctx, lockKey(name)).Val(); n != 0 {
		t.Errorf("lock key still exists after Unlock")
	}
}

func TestLockKeyHoldsOwnerValueWithTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(10*time.Second), dlock.WithOwnerInfo("worker-7"))
	name := t.Name()
	ctx := testCtx(t)
	lease := mustLock(t, c, name)
	defer lease.Unlock(ctx)

	rdb := srv.Client(t)
	val := rdb.Get(ctx, lockKey(name)).Val()
	if len(val) != 32+len(";worker-7") || val[32:] != ";worker-7" {
		t.Errorf("lock value %q: want 32 hex digits then \";worker-7\"", val)
	}
	pttl := rdb.PTTL(ctx, lockKey(name)).Val()
	if pttl <= 9*time.Second || pttl > 10*time.Second {
		t.Errorf("PTTL %v, want about 10s", pttl)
	}
	if got := lease.Name(); got != name {
		t.Errorf("Name() = %q, want %q", got, name)
	}
	fence, err := rdb.Get(ctx, lockKey(name)+":fence").Int64()
	if err != nil || fence != lease.Token() {
		t.Errorf("fence key = %d (%v), want the lease's token %d", fence, err, lease.Token())
	}
	if ttl := rdb.PTTL(ctx, lockKey(name)+":fence").Val(); ttl <= 0 {
		t.Errorf("fence key has no expiry (PTTL %v)", ttl)
	}
}

// TestMutualExclusionAcrossClients runs a non-atomic read-modify-write on a
// Redis counter from several Clients with their own pools, as separate
// processes would: any overlap loses an update.
func TestMutualExclusionAcrossClients(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	const clients, workers, rounds = 4, 4, 25
	name := t.Name()
	counterKey := "counter:" + name
	rdb := srv.Client(t)
	ctx := testCtx(t)
	rdb.Del(ctx, counterKey) // left by an earlier run (-count)

	var inside, overlaps atomic.Int32
	var lastToken atomic.Int64
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
					if tok := lease.Token(); tok <= lastToken.Load() {
						t.Errorf("token %d not above the previous holder's %d", tok, lastToken.Load())
					} else {
						lastToken.Store(tok)
					}
					n, err := rdb.Get(ctx, counterKey).Int()
					if err != nil && !errors.Is(err, redis.Nil) {
						t.Errorf("GET: %v", err)
					}
					time.Sleep(100 * time.Microsecond) // widen the race window
					rdb.Set(ctx, counterKey, n+1, 0)
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
	if n := rdb.Exists(ctx, lockKey(name), lockKey(name)+":q", lockKey(name)+":w").Val(); n != 0 {
		t.Errorf("%d lock keys left behind", n)
	}
}

func TestLockIsHandedToWaiterPromptly(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv)
	name := t.Name()
	ctx := testCtx(t)
	lease := mustLock(t, a, name)

	type result struct {
		lease *dlock.Lease
		err   error
		at    time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := b.Mutex(name).Lock(ctx)
		got <- result{l, err, time.Now()}
	}()
	waitQueued(t, srv, name, 1)
	released := time.Now()
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("waiting Lock: %v", r.err)
	}
	defer r.lease.Unlock(ctx)
	// Waiters poll only every WithWaiterLease/3 = 1s: far quicker means the
	// release woke the waiter.
	if d := r.at.Sub(released); d > 500*time.Millisecond {
		t.Errorf("waiter got the lock %v after the release; want a few ms", d)
	}
	if r.lease.Token() <= lease.Token() {
		t.Errorf("token after hand-off %d not above %d", r.lease.Token(), lease.Token())
	}
	// The hand-off's short claim window is renewed to the full TTL at once.
	waitFor(t, 5*time.Second, func() bool {
		d, err := r.lease.TTL(ctx)
		return err == nil && d > 20*time.Second
	}, "the handed-over lease to be renewed to its full TTL")
}

// waitQueued waits until n owners are queued for name.
func waitQueued(t testing.TB, srv *redistest.Server, name string, n int64) {
	t.Helper()
	rdb := srv.Client(t)
	waitFor(t, 10*time.Second, func() bool {
		return rdb.ZCard(context.Background(), lockKey(name)+":q").Val() == n
	}, fmt.Sprintf("%d waiters queued on %q", n, name))
}

func TestWaitersAreServedInArrivalOrder(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	holder := newClient(t, srv)
	lease := mustLock(t, holder, name)

	const n = 5
	order := make(chan int, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		c := newClient(t, srv)
		i := i // go 1.21: one variable for the whole loop otherwise
		lockThen(ctx, t, &wg, c, name, func(*dlock.Lease) { order <- i })
		waitQueued(t, srv, name, int64(i+1)) // arrive one after another
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Errorf("waiter %d got the lock in turn %d", got, want)
		}
		want++
	}
}

func TestCancelledLockLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv)
	name := t.Name()
	lease := mustLock(t, a, name)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := b.Mutex(name).Lock(ctx)
		errc <- err
	}()
	waitQueued(t, srv, name, 1)
	cancel()
	err := <-errc
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: got %v, want ErrNotObtained and context.Canceled", err)
	}
	rdb := srv.Client(t)
	bg := context.Background()
	waitFor(t, 5*time.Second, func() bool {
		return rdb.Exists(bg, lockKey(name)+":q", lockKey(name)+":w").Val() == 0
	}, "the cancelled waiter to leave the queue")
	if err := lease.Unlock(bg); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if n := rdb.Exists(bg, lockKey(name)).Val(); n != 0 {
		t.Errorf("the lock was handed to the cancelled waiter")
	}
}

func TestLockDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	name := t.Name()
	lease := mustLock(t, c, name)
	defer lease.Unlock(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Mutex(name).Lock(ctx)
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrNotObtained and context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Lock returned %v after its 150ms deadline", d)
	}
}

// TestHandoffToGrantedButCancelledWaiter: a waiter cancelled just as the
// lock is handed to it must pass the lock on, not sit on it.
func TestHandoffRaceWithCancellation(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	bg := context.Background()
	for i := 0; i < 20; i++ {
		a, b := newClient(t, srv), newClient(t, srv)
		lease := mustLock(t, a, name)
		ctx, cancel := context.WithCancel(bg)
		errc := make(chan error, 1)
		go func() {
			l, err := b.Mutex(name).Lock(ctx)
			if err == nil {
				err = l.Unlock(bg)
			}
			errc <- err
		}()
		waitQueued(t, srv, name, 1)
		go cancel()
		if err := lease.Unlock(bg); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("waiter: %v", err)
		}
		// Whoever won the race, the lock must come free: well before the
		// 3s claim window a hand-off gives, so the cancelled waiter passed
		// it on instead of letting it expire.
		wctx, cancel := context.WithTimeout(bg, 2*time.Second)
		l, err := a.Mutex(name).Lock(wctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: lock not free after the race: %v", i, err)
		}
		_ = l.Unlock(bg)
	}
}

func TestSpinWait(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	opt := dlock.WithWaitStrategy(dlock.SpinWait(time.Millisecond, 20*time.Millisecond))
	a, b := newClient(t, srv, opt), newClient(t, srv, opt)
	name := t.Name()
	ctx := testCtx(t)
	lease := mustLock(t, a, name)
	got := lockThenUnlock(ctx, b.Mutex(name))
	waitQueued(t, srv, name, 1)
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("spinning waiter: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("spinning waiter never got the lock")
	}
}

func TestFencingTokensIncreaseEvenAfterTheCounterExpires(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	rdb := srv.Client(t)
	name := t.Name()
	ctx := testCtx(t)
	var last int64
	for i := 0; i < 50; i++ {
		if i%10 == 5 {
			rdb.Del(ctx, lockKey(name)+":fence") // as if it had expired
		}
		lease := mustLock(t, c, name)
		if lease.Token() <= last {
			t.Fatalf("token %d after %d", lease.Token(), last)
		}
		last = lease.Token()
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestClientsOnSeparatePrefixesDoNotInteract(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	a := newClient(t, srv, dlock.WithKeyPrefix("app1:"))
	b := newClient(t, srv, dlock.WithKeyPrefix("app2:"))
	ctx := testCtx(t)
	la, err := a.Mutex(t.Name()).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Unlock(ctx)
	lb, err := b.Mutex(t.Name()).TryLock(ctx)
	if err != nil {
		t.Fatalf("same name under another prefix: %v", err)
	}
	defer lb.Unlock(ctx)
	if n := srv.Client(t).Exists(ctx, "app1:{"+t.Name()+"}", "app2:{"+t.Name()+"}").Val(); n != 2 {
		t.Errorf("want both prefixed keys, found %d", n)
	}
}

// TestHandoffUnderShortTTLKeepsTheLease: a waiter handed the lock long after
// its last poll must still get a usable lease (it claims the lock when its
// conservative validity is nearly spent), never one that is lost at once.
func TestHandoffUnderShortTTLKeepsTheLease(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	const clients, rounds = 4, 2
	var wg sync.WaitGroup
	var lost atomic.Int32
	for i := 0; i < clients; i++ {
		// Short, yet long enough that a renewal every third of it
		// outlasts a stall of a loaded 2-core machine under -race.
		c := newClient(t, srv, dlock.WithTTL(400*time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				l, err := c.Mutex(name).Lock(ctx)
				if err != nil {
					t.Errorf("Lock: %v", err)
					return
				}
				select {
				case <-l.Done():
					lost.Add(1)
					t.Errorf("lease lost while held: %v", l.Err())
				case <-time.After(600 * time.Millisecond): // 1.5 TTLs
				}
				_ = l.Unlock(ctx)
			}
		}()
	}
	wg.Wait()
	if n := lost.Load(); n != 0 {
		t.Errorf("%d of %d leases were lost", n, clients*rounds)
	}
}
