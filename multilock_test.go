package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMultiLockIsAllOrNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c, other := newClient(t, srv), newClient(t, srv)
	ctx := testCtx(t)
	p := t.Name() + ":"
	held := mustLock(t, other, p+"b")

	if _, err := c.MultiLock(p+"c", p+"a", p+"b").TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock with one lock taken: got %v, want ErrNotObtained", err)
	}
	rdb := srv.Client(t)
	if n := rdb.Exists(ctx, lockKey(p+"a"), lockKey(p+"c")).Val(); n != 0 {
		t.Fatalf("a failed MultiLock left %d of its other locks held", n)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.MultiLock(p+"c", p+"a", p+"b").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with every lock free: %v", err)
	}
	for _, n := range []string{"a", "b", "c"} {
		if _, err := other.Mutex(p + n).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("Mutex %q was free while the MultiLock held it: %v", n, err)
		}
		tok, ok := l.TokenOf(p + n)
		if !ok || tok <= 0 || tok > l.Token() {
			t.Errorf("TokenOf(%q) = %d, %v (Token %d)", n, tok, ok, l.Token())
		}
	}
	if _, ok := l.TokenOf("nope"); ok {
		t.Error("TokenOf a name outside the set")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if n := rdb.Exists(ctx, lockKey(p+"a"), lockKey(p+"b"), lockKey(p+"c")).Val(); n != 0 {
		t.Errorf("%d locks still held after Unlock", n)
	}
}

func TestMultiLockWaitsForEveryLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c, other := newClient(t, srv), newClient(t, srv)
	ctx := testCtx(t)
	p := t.Name() + ":"
	hb := mustLock(t, other, p+"b")
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := c.MultiLock(p+"a", p+"b").Lock(ctx)
		if err != nil {
			t.Errorf("Lock: %v", err)
		}
		got <- l
	}()
	waitQueued(t, srv, p+"b", 1)
	if _, err := other.Mutex(p + "a").TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("the waiting MultiLock does not hold its first lock in canonical order: %v", err)
	}
	if err := hb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMultiLockCancelledReleasesWhatItTook(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c, other := newClient(t, srv), newClient(t, srv)
	p := t.Name() + ":"
	hb := mustLock(t, other, p+"b")
	defer hb.Unlock(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.MultiLock(p+"a", p+"b").Lock(ctx)
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	waitFor(t, 5*time.Second, func() bool {
		return srv.Client(t).Exists(context.Background(), lockKey(p+"a"), lockKey(p+"b")+":q").Val() == 0
	}, "the cancelled MultiLock to release its first lock and leave the queue")
}

// TestMultiLocksNeverDeadlock runs MultiLocks over overlapping names given
// in opposite orders, plus single Mutexes, and checks exclusion per name.
func TestMultiLocksNeverDeadlock(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	p := t.Name() + ":"
	names := []string{p + "a", p + "b", p + "c"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inside := make([]atomic.Int32, len(names))
	index := map[string]int{}
	for i, n := range names {
		index[n] = i
	}
	enter := func(set []string) {
		for _, n := range set {
			if inside[index[n]].Add(1) != 1 {
				t.Errorf("two holders of %q", n)
			}
		}
		time.Sleep(200 * time.Microsecond)
		for _, n := range set {
			inside[index[n]].Add(-1)
		}
	}
	sets := [][]string{{names[0], names[1]}, {names[1], names[0]}, {names[2], names[1], names[0]}, {names[1]}, {names[2], names[0]}}
	var wg sync.WaitGroup
	var done atomic.Int32
	for g := 0; g < 8; g++ {
		c := newClient(t, srv)
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(g)))
			for i := 0; i < 15; i++ {
				set := sets[rng.Intn(len(sets))]
				l, err := c.MultiLock(set...).Lock(ctx)
				if err != nil {
					t.Errorf("worker %d: %v (deadlock?)", g, err)
					return
				}
				enter(set)
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("worker %d: Unlock: %v", g, err)
					return
				}
				done.Add(1)
			}
		}(g)
	}
	wg.Wait()
	if n := done.Load(); n != 8*15 {
		t.Errorf("%d of %d critical sections completed", n, 8*15)
	}
}

func TestMultiLockLostWhenAnyLockIsLost(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(300*time.Millisecond))
	ctx := testCtx(t)
	p := t.Name() + ":"
	l, err := c.MultiLock(p+"a", p+"b").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Client(t).Del(ctx, lockKey(p+"b"))
	waitDone(t, l, 5*time.Second)
	if !errors.Is(l.Err(), dlock.ErrLockLost) {
		t.Fatalf("Err() = %v, want ErrLockLost", l.Err())
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock after a loss: got %v, want ErrNotHeld", err)
	}
	// The loss itself releases the other lock, in the background; an
	// Unlock that meets that release in flight returns without waiting
	// for it, so the key may outlive Unlock by a round trip.
	rdb := srv.Client(t)
	waitFor(t, 5*time.Second, func() bool {
		return rdb.Exists(ctx, lockKey(p+"a")).Val() == 0
	}, "the lost MultiLock's other lock to be released")
}

func TestMultiLockRejectsBadNames(t *testing.T) {
	srv := redistest.Shared(t)
	rdb, counter := countingClient(t, srv)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t)
	for label, names := range map[string][]string{
		"none":      nil,
		"duplicate": {"a", "b", "a"},
		"empty":     {"a", ""},
		"no tag":    {"}a"},
	} {
		if _, err := c.MultiLock(names...).TryLock(ctx); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", label, err)
		}
	}
	if _, err := c.MultiLock("a").With(dlock.WithTTL(0)).Lock(ctx); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("With(bad TTL): got %v, want ErrInvalidArgument", err)
	}
	if n := counter.n.Load(); n != 0 {
		t.Errorf("rejected MultiLocks sent %d commands", n)
	}
}

// testMultiLockOnCluster is run by TestCluster (cluster_test.go), which
// starts one cluster for every Cluster test.
func testMultiLockOnCluster(t *testing.T, cluster *redistest.Cluster) {
	c, err := dlock.New(cluster.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other, err := dlock.New(cluster.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := testCtx(t)
	// Names across many slots, and names sharing a hash tag (one slot).
	var spread []string
	for i := 0; i < 6; i++ {
		spread = append(spread, fmt.Sprintf("order:%d", i))
	}
	sameSlot := []string{"{cart:7}:items", "{cart:7}:total", "{cart:7}:coupon"}
	for _, names := range [][]string{spread, sameSlot, append(spread, sameSlot...)} {
		l, err := c.MultiLock(names...).TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock(%v): %v", names, err)
		}
		if _, err := other.Mutex(names[len(names)-1]).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("a lock of the set was free: %v", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
	}
	// Contention across slots: the waiting path on Cluster.
	held := mustLock(t, other, spread[3])
	got := make(chan error, 1)
	go func() {
		l, err := c.MultiLock(spread...).Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	rdb := cluster.Client(t)
	waitFor(t, 10*time.Second, func() bool {
		return rdb.ZCard(ctx, lockKey(spread[3])+":q").Val() == 1
	}, "the MultiLock to queue for the held lock")
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiting MultiLock on Cluster: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting MultiLock never got its locks")
	}
}

// A MultiLock.Lock that cannot reach Redis waits, as Mutex.Lock does,
// instead of failing at its first attempt: it ends at its deadline as a
// wait (ErrNotObtained and ctx's error, with the failure it kept meeting),
// and takes the locks once the server is back.
func TestMultiLockWaitsThroughAnOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	ml := c.MultiLock(t.Name()+":a", t.Name()+":b")
	srv.Kill()

	if _, err := ml.TryLock(ctx); err == nil || errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock with Redis down: got %v, want the connection error, not ErrNotObtained", err)
	}
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := ml.Lock(short)
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "last error") {
		t.Fatalf("Lock with Redis down until its deadline: got %v, want ErrNotObtained and DeadlineExceeded with the last error", err)
	}

	got := make(chan error, 1)
	go func() {
		l, err := ml.Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	srv.Restart()
	if err := <-got; err != nil {
		t.Fatalf("Lock across a restart: %v", err)
	}
}

// A MultiLock refused because a lock is free but others wait for it says
// so, rather than just "not obtained".
func TestMultiLockRefusalBehindWaitersSaysWhy(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c, holder, waiter := newClient(t, srv), newClient(t, srv), newClient(t, srv)
	ctx := testCtx(t)
	p := t.Name() + ":" + dlock.NewOwnerID()[:8] + ":" // its waiter stays queued a while after the test: a rerun must not meet it
	if _, err := holder.Mutex(p+"b", dlock.WithAutoRenew(false)).TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	// The waiter polls every 10 s (a third of its claim window), or when
	// the holder's key would expire, in 30 s; and once more right after its
	// subscription is confirmed, unless the channel already was: a first,
	// short wait leaves it subscribed (for the subscription's linger).
	rdb := srv.Client(t)
	wm := waiter.Mutex(p+"b", dlock.WithWaiterLease(30*time.Second))
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := wm.Lock(short)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the first, short wait: %v, want its deadline", err)
	}
	waitFor(t, 10*time.Second, func() bool {
		return rdb.ZCard(ctx, lockKey(p+"b")+":q").Val() == 0 &&
			rdb.PubSubNumSub(ctx, lockKey(p+"b")).Val()[lockKey(p+"b")] == 1
	}, "the first wait to leave the queue, its subscription kept")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _, _ = wm.Lock(wctx) }()
	waitFor(t, 10*time.Second, func() bool {
		return rdb.ZCard(ctx, lockKey(p+"b")+":q").Val() == 1
	}, "the waiter to queue")
	// The holder dies: its key goes, and nothing is published, so the
	// waiter stays queued on a free lock until its next poll. (A key left
	// to expire would make the waiter look again just after the expiry.)
	rdb.Del(ctx, lockKey(p+"b"))
	_, err = c.MultiLock(p+"a", p+"b").TryLock(ctx)
	if !errors.Is(err, dlock.ErrNotObtained) || !strings.Contains(err.Error(), "others waiting for it came first") {
		t.Fatalf("TryLock of a free lock with a waiter: got %v, want ErrNotObtained saying others wait", err)
	}
}

// A MultiLock.Lock whose first, all-at-once attempt lost its reply after the
// server ran it waits for the locks as a fresh owner: the clean-up of that
// attempt releases whatever its owner holds, in the background, and would
// otherwise take back locks the wait had just been granted.
func TestMultiLockLostReplyThenWaitKeepsWhatItGets(t *testing.T) {
	t.Parallel()
	c, proxy := clientThroughProxy(t)
	other := newClient(t, redistest.Shared(t))
	ctx := testCtx(t)
	p := t.Name() + ":"
	ml := c.MultiLock(p+"a", p+"b")
	rdb := redistest.Shared(t).Client(t)
	var l *dlock.Lease
	err := afterLostReply(t, []*redistest.Proxy{proxy},
		func() bool { return rdb.Exists(ctx, lockKey(p+"a"), lockKey(p+"b")).Val() == 2 },
		func() error {
			var err error
			l, err = ml.Lock(ctx)
			return err
		})
	if err != nil {
		t.Fatalf("Lock after a lost reply: %v", err)
	}
	// Let the lost attempt's clean-up run its course: it must leave the
	// lease's locks alone.
	for _, name := range []string{p + "a", p + "b"} {
		waitFor(t, 10*time.Second, func() bool {
			return rdb.Get(ctx, lockKey(name)).Val() == dlock.LeaseOwner(l)
		}, "the lease's owner on "+name)
	}
	for i := 0; i < 20; i++ {
		for _, name := range []string{p + "a", p + "b"} {
			if _, err := other.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
				t.Fatalf("%s was free while the MultiLock held it: %v", name, err)
			}
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// A MultiLock lease that lost one of its locks gives the others back by
// itself, even when its holder never calls Unlock (they were renewed for as
// long as the Client lived); closing the Client still releases nothing.
func TestMultiLockLossReleasesTheOtherLocks(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(900*time.Millisecond))
	other := newClient(t, srv)
	ctx := testCtx(t)
	p := t.Name() + ":"
	l, err := c.MultiLock(p+"a", p+"b", p+"c").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := other.ForceUnlockOwner(ctx, p+"b", l.Owner()); err != nil || n != 1 {
		t.Fatalf("ForceUnlockOwner(b) = %d, %v", n, err)
	}
	waitDone(t, l, 5*time.Second)
	rdb := srv.Client(t)
	waitFor(t, 5*time.Second, func() bool {
		return rdb.Exists(ctx, lockKey(p+"a"), lockKey(p+"c")).Val() == 0
	}, "the lost MultiLock's other locks to be released")
	for _, name := range []string{p + "a", p + "b", p + "c"} {
		got, err := other.Mutex(name).TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock(%s) after the MultiLock was lost: %v", name, err)
		}
		_ = got.Unlock(ctx)
	}

	// Close marks the lease lost but releases nothing: the holder may
	// still be working, and the keys expire by their TTL.
	l2, err := c.MultiLock(p+"d", p+"e").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	waitDone(t, l2, 5*time.Second)
	if n := rdb.Exists(ctx, lockKey(p+"d"), lockKey(p+"e")).Val(); n != 2 {
		t.Errorf("Close released %d of a MultiLock's 2 locks, want none", 2-n)
	}
}
