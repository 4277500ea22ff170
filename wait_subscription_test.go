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

// A waiter whose subscription is slow to be confirmed must keep refreshing
// its place in the queue meanwhile: waiting for the confirmation alone, its
// place would expire under a short waiter lease, and a release meanwhile
// would go to a waiter that came after it.
func TestSlowSubscriptionKeepsTheWaitersPlace(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	// A 600 ms claim window: waiters refresh their place every 200 ms.
	const lease = 600 * time.Millisecond
	opts := []dlock.Option{dlock.WithTTL(10 * time.Second), dlock.WithWaiterLease(lease)}
	ctx := testCtx(t)
	name := uniqueName(t)
	rdb := srv.Client(t)
	key := lockKey(name)

	holder, later := newClient(t, srv, opts...), newClient(t, srv, opts...)
	first, ps := clientWithHeldSubscription(t, srv, holder, name, opts...)
	defer ps.HoldOpenReplies(false)

	held := mustLock(t, holder, name)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		who string
		l   *dlock.Lease
		err error
	}
	results := make(chan result, 2)
	lock := func(who string, c *dlock.Client) {
		l, err := c.FairMutex(name).Lock(lctx)
		results <- result{who, l, err}
	}
	go lock("first", first)
	waitFor(t, 5*time.Second, func() bool { return rdb.ZCard(ctx, key+":q").Val() == 1 }, "the first waiter queued")
	queued := time.Now()
	go lock("later", later)
	waitFor(t, 5*time.Second, func() bool { return rdb.ZCard(ctx, key+":q").Val() == 2 }, "the second waiter queued")
	// Release after the first waiter's lease would have run out had it
	// not refreshed its place, and before the second its old code gave
	// the confirmation ended: a window for the fault, not a
	// synchronization.
	time.Sleep(time.Until(queued.Add(lease + 200*time.Millisecond)))
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-results
	if r.err != nil {
		t.Fatalf("%s waiter: %v", r.who, r.err)
	}
	if r.who != "first" {
		t.Errorf("the waiter that queued second was served first: the first one lost its place while its subscription was being confirmed")
	}
	if err := r.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r = <-results
	if r.err != nil {
		t.Fatalf("%s waiter: %v", r.who, r.err)
	}
	if err := r.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// clientWithHeldSubscription returns a Client whose commands go straight to
// srv and whose pub/sub goes through the returned proxy. Its subscription
// connection is made first, by a wait for another lock (which holder
// holds meanwhile); then the proxy holds back every reply on that
// connection, so a SUBSCRIBE the Client sends is never confirmed until the
// caller turns HoldOpenReplies off.
func clientWithHeldSubscription(t *testing.T, srv *redistest.Server, holder *dlock.Client, name string, opts ...dlock.Option) (*dlock.Client, *redistest.Proxy) {
	t.Helper()
	ctx := testCtx(t)
	rdb := srv.Client(t)
	ps := redistest.StartProxy(t, srv.Addr())
	cmd := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	sub := redis.NewClient(&redis.Options{Addr: ps.Addr()})
	t.Cleanup(func() { _ = cmd.Close(); _ = sub.Close() })
	c, err := dlock.New(splitClient{Client: cmd, sub: sub}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })

	warm := name + "-warm"
	warmHeld := mustLock(t, holder, warm)
	wctx, wcancel := context.WithCancel(ctx)
	warmed := make(chan error, 1)
	go func() { _, err := c.Mutex(warm).Lock(wctx); warmed <- err }()
	waitFor(t, 10*time.Second, func() bool { return rdb.PubSubNumSub(ctx, lockKey(warm)).Val()[lockKey(warm)] == 1 }, "the subscription for another lock")
	wcancel()
	if err := <-warmed; !errors.Is(err, context.Canceled) {
		t.Fatalf("the wait for the other lock: %v", err)
	}
	if err := warmHeld.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	ps.HoldOpenReplies(true)
	return c, ps
}
