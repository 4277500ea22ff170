package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestLatchCallsSentTwiceCountOnce: a CountDown or TrySetCount whose reply
// was lost and that go-redis therefore sent again must count once, and
// report what the first sending did.
func TestLatchCallsSentTwiceCountOnce(t *testing.T) {
	t.Parallel()
	c, srv, proxy := clientWithLostReplies(t)
	ctx := testCtx(t)
	// Load the scripts first: a NOSCRIPT reply would be held too.
	warm := c.Latch(t.Name() + "-warm")
	if _, err := warm.TrySetCount(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := warm.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	l := c.Latch(t.Name())
	count := func() string { v, _ := srv.Do(t, "GET", latchKey(t.Name())).(string); return v }

	var set bool
	err := afterLostReply(t, []*redistest.Proxy{proxy}, func() bool { return count() == "5" }, func() (err error) {
		set, err = l.TrySetCount(ctx, 5)
		return err
	})
	if err != nil || !set {
		t.Fatalf("TrySetCount sent twice: got %v, %v; want true, nil (the first sending set it)", set, err)
	}
	err = afterLostReply(t, []*redistest.Proxy{proxy}, func() bool { return count() == "4" }, func() error { return l.CountDown(ctx) })
	if err != nil {
		t.Fatalf("CountDown sent twice: %v", err)
	}
	if n, err := l.Count(ctx); err != nil || n != 4 {
		t.Fatalf("after one CountDown sent twice from 5: Count = %d, %v; want 4", n, err)
	}
}

// A waiter cut off from Redis while the latch is counted down, and for
// longer than the latch remembers its calls (here: that memory is wiped),
// still sees a count-down, not an expiry, when it reads again.
func TestLatchCountDownSeenLateIsNotAnExpiry(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := dlock.New(rdb, dlock.WithWaiterLease(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	a := newClient(t, srv)
	ctx := testCtx(t)
	name := t.Name()
	if _, err := a.Latch(name).TrySetCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- b.Latch(name).Wait(ctx) }()
	admin := srv.Client(t)
	waitFor(t, 10*time.Second, func() bool {
		return admin.PubSubNumSub(ctx, latchKey(name)).Val()[latchKey(name)] == 1
	}, "the waiter to subscribe")
	proxy.Blackhole(true)
	if err := a.Latch(name).CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	admin.Del(ctx, latchKey(name)+":calls") // what a minute does
	proxy.Blackhole(false)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Wait on a latch counted down while it was cut off: %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter did not return after it could reach Redis again")
	}
}

// latchWaiter starts a Wait on latch name through a Client behind a proxy,
// and returns once the waiter has seen the latch counting and subscribed,
// with the proxy and where Wait's result arrives. opts are the latch's.
func latchWaiter(t *testing.T, name string, opts ...dlock.Option) (*redistest.Proxy, <-chan error) {
	t.Helper()
	c, proxy := clientThroughProxy(t)
	ctx := testCtx(t)
	got := make(chan error, 1)
	go func() { got <- c.Latch(name, opts...).Wait(ctx) }()
	// A waiter subscribes only after a read found the latch counting.
	rdb := redistest.Shared(t).Client(t)
	waitFor(t, 10*time.Second, func() bool {
		return rdb.PubSubNumSub(ctx, latchKey(name)).Val()[latchKey(name)] == 1
	}, "the waiter to subscribe")
	return proxy, got
}

// waitResult returns what a Wait sent to got within limit.
func waitResult(t *testing.T, got <-chan error, limit time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-got:
		return err
	case <-time.After(limit):
		t.Fatalf("Wait still blocked %v after %s", limit, what)
		return nil
	}
}

// TestLatchReArmedAtOnceStillReleasesWaiter: the last CountDown wakes a
// waiter, but before the waiter reads the latch (its replies are slower
// than the coordinator; here held back) TrySetCount has set the next count.
// The count the waiter saw reached zero: Wait returns nil, not after the
// next count, nor never.
func TestLatchReArmedAtOnceStillReleasesWaiter(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	clearLatch(ctx, t, name)
	coord := newClient(t, srv).Latch(name)
	if ok, err := coord.TrySetCount(ctx, 1); err != nil || !ok {
		t.Fatalf("TrySetCount = %v, %v", ok, err)
	}
	proxy, got := latchWaiter(t, name)
	proxy.HoldOpenReplies(true)
	if err := coord.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := coord.TrySetCount(ctx, 1); err != nil || !ok {
		t.Fatalf("TrySetCount for the next count = %v, %v", ok, err)
	}
	proxy.HoldOpenReplies(false)
	if err := waitResult(t, got, 10*time.Second, "the count it saw reached zero and the next was set"); err != nil {
		t.Fatalf("Wait = %v, want nil: the count it saw reached zero", err)
	}

	// Every key of the latch expires, and all share the name's hash tag.
	rdb := srv.Client(t)
	keys := rdb.Keys(ctx, latchKey(name)+"*").Val()
	if len(keys) < 3 {
		t.Errorf("latch keys %v, want the count, its calls and its round at least", keys)
	}
	for _, k := range keys {
		if d := rdb.PTTL(ctx, k).Val(); d <= 0 {
			t.Errorf("%s: PTTL %v, want an expiry", k, d)
		}
	}
}

// TestLatchCountSeenEndsAsItEnded: whatever happens to the latch before a
// waiter looks again (here its replies are held back meanwhile), Wait
// reports how the count it saw ended: nil when a CountDown took it to zero,
// ErrLatchExpired when it expired, even if later counts were set, counted
// down or expired since. An expiry is made by deleting the count, as its
// TTL would.
func TestLatchCountSeenEndsAsItEnded(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	coord := newClient(t, srv)
	for _, tc := range []struct {
		name        string
		then        func(ctx context.Context, t *testing.T, l *dlock.Latch, key string)
		wantExpired bool
	}{
		{"counted down; the next count expired", func(ctx context.Context, t *testing.T, l *dlock.Latch, key string) {
			mustCountDown(ctx, t, l)
			short := coord.Latch(l.Name(), dlock.WithTTL(200*time.Millisecond))
			mustSet(ctx, t, short)
			waitFor(t, 10*time.Second, func() bool { return rdb.Exists(ctx, key).Val() == 0 }, "the next count to expire")
		}, false},
		{"counted down; the next count expired; a third set", func(ctx context.Context, t *testing.T, l *dlock.Latch, key string) {
			mustCountDown(ctx, t, l)
			short := coord.Latch(l.Name(), dlock.WithTTL(200*time.Millisecond))
			mustSet(ctx, t, short)
			waitFor(t, 10*time.Second, func() bool { return rdb.Exists(ctx, key).Val() == 0 }, "the next count to expire")
			mustSet(ctx, t, l)
		}, false},
		{"counted down by an older dlock; the next count set", func(ctx context.Context, t *testing.T, l *dlock.Latch, key string) {
			// What an older CountDown writes: no round record.
			if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Del(ctx, key)
				p.Set(ctx, key+":zero", "1", time.Hour)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			mustSet(ctx, t, l)
		}, false},
		{"expired; the next count set", func(ctx context.Context, t *testing.T, l *dlock.Latch, key string) {
			rdb.Del(ctx, key)
			mustSet(ctx, t, l)
		}, true},
		{"expired; the next count set and counted down", func(ctx context.Context, t *testing.T, l *dlock.Latch, key string) {
			rdb.Del(ctx, key)
			mustSet(ctx, t, l)
			mustCountDown(ctx, t, l)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := t.Name()
			ctx := testCtx(t)
			clearLatch(ctx, t, name)
			l := coord.Latch(name)
			mustSet(ctx, t, l)
			proxy, got := latchWaiter(t, name)
			proxy.HoldOpenReplies(true)
			tc.then(ctx, t, l, latchKey(name))
			proxy.HoldOpenReplies(false)
			err := waitResult(t, got, 10*time.Second, tc.name)
			switch {
			case tc.wantExpired && !errors.Is(err, dlock.ErrLatchExpired):
				t.Fatalf("Wait = %v, want ErrLatchExpired: the count it saw expired", err)
			case !tc.wantExpired && err != nil:
				t.Fatalf("Wait = %v, want nil: the count it saw reached zero", err)
			}
		})
	}
}

// TestLatchReArmedWhileWaiterCutOff: a waiter cut off from Redis hears no
// wake-up at all while the count it saw reaches zero and the next is set;
// it learns that the count reached zero when it reads again.
func TestLatchReArmedWhileWaiterCutOff(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	clearLatch(ctx, t, name)
	coord := newClient(t, srv).Latch(name)
	mustSet(ctx, t, coord)
	proxy, got := latchWaiter(t, name)
	// Let the read it makes once subscribed end, so that the next is its
	// poll (every WithWaiterLease/3, 1s), after the new count was set.
	time.Sleep(100 * time.Millisecond)
	proxy.Blackhole(true)
	mustCountDown(ctx, t, coord) // its wake-up is dropped
	mustSet(ctx, t, coord)
	proxy.Blackhole(false)
	if err := waitResult(t, got, 30*time.Second, "it could reach Redis again"); err != nil {
		t.Fatalf("Wait = %v, want nil: the count it saw reached zero", err)
	}
}

// clearLatch deletes what an earlier -count run left of latch name: its
// tests leave counts running.
func clearLatch(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	k := latchKey(name)
	redistest.Shared(t).Client(t).Del(ctx, k, k+":calls", k+":zero", k+":round")
}

func mustSet(ctx context.Context, t *testing.T, l *dlock.Latch) {
	t.Helper()
	if ok, err := l.TrySetCount(ctx, 1); err != nil || !ok {
		t.Fatalf("TrySetCount(1) = %v, %v; want true", ok, err)
	}
}

func mustCountDown(ctx context.Context, t *testing.T, l *dlock.Latch) {
	t.Helper()
	if err := l.CountDown(ctx); err != nil {
		t.Fatalf("CountDown: %v", err)
	}
}

// TestLatchForeignCallsZset: a sorted set without an expiry at the latch's
// calls key is not one a latch wrote (every call gives it one): TrySetCount
// and CountDown report ErrKeyConflict and leave it, and the count, as they
// are. They gave it an expiry and dropped its old members. Found beside the
// same gap in Semaphore.AddPermits.
func TestLatchForeignCallsZset(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	name := uniqueName(t)
	l := c.Latch(name)
	if ok, err := l.TrySetCount(ctx, 2); err != nil || !ok {
		t.Fatalf("TrySetCount: %v, %v", ok, err)
	}
	calls := latchKey(name) + ":calls"
	rdb.Del(ctx, calls)
	rdb.ZAdd(ctx, calls, redis.Z{Score: 1, Member: "someone else's"})
	defer rdb.Del(ctx, calls)

	if err := l.CountDown(ctx); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Errorf("CountDown with a foreign zset at :calls: got %v, want ErrKeyConflict", err)
	}
	if _, err := l.TrySetCount(ctx, 3); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Errorf("TrySetCount with a foreign zset at :calls: got %v, want ErrKeyConflict", err)
	}
	if d := rdb.PTTL(ctx, calls).Val(); d != -1 {
		t.Errorf("the foreign zset was given an expiry (%v)", d)
	}
	if m := rdb.ZRange(ctx, calls, 0, -1).Val(); len(m) != 1 || m[0] != "someone else's" {
		t.Errorf("the foreign zset holds %q now", m)
	}
	if v := rdb.Get(ctx, latchKey(name)).Val(); v != "2" {
		t.Errorf("the count is %q, want 2 (unchanged)", v)
	}
}

// TestLatchForeignRoundKeyChangesNothing: a CountDown that meets a foreign
// value under the latch's round key reports ErrKeyConflict and changes
// nothing. It remembered its call id first, so the same call sent again
// (go-redis resends after a lost reply) would have counted as done without
// the decrement.
func TestLatchForeignRoundKeyChangesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	name := uniqueName(t)
	l := c.Latch(name)
	if ok, err := l.TrySetCount(ctx, 2); err != nil || !ok {
		t.Fatalf("TrySetCount: %v, %v", ok, err)
	}
	calls, round := latchKey(name)+":calls", latchKey(name)+":round"
	before := rdb.ZCard(ctx, calls).Val()
	rdb.Set(ctx, round, "not a round", time.Minute)
	defer rdb.Del(ctx, round)
	if err := l.CountDown(ctx); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Fatalf("CountDown with a foreign round key: got %v, want ErrKeyConflict", err)
	}
	if n := rdb.ZCard(ctx, calls).Val(); n != before {
		t.Errorf("the calls key went from %d to %d ids: the failed CountDown counts as done", before, n)
	}
	if v := rdb.Get(ctx, latchKey(name)).Val(); v != "2" {
		t.Errorf("the count is %q, want 2 (unchanged)", v)
	}
}
