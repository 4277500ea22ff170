package dlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/redistest"
)

// unconfirmedDriver is the go-redis driver on a real server, except that
// its subscriptions never hear the server confirm a channel: as when the
// network drops the confirmation of a SUBSCRIBE and the connection lives
// on (the reliability suite's blackhole does that).
type unconfirmedDriver struct{ driver.Driver }

func (d unconfirmedDriver) Subscribe(h driver.Handler) driver.Subscription {
	return unconfirmedSubscription{d.Driver.Subscribe(h)}
}

type unconfirmedSubscription struct{ driver.Subscription }

func (unconfirmedSubscription) Subscribe(ctx context.Context, _ ...string) error {
	<-ctx.Done()
	return ctx.Err()
}

// A waiter whose subscription is never confirmed polls: a lost
// confirmation costs latency, not the rest of the wait.
func TestWaiterPollsWhenItsSubscriptionIsNeverConfirmed(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	d := goredis.New(rdb)
	t.Cleanup(func() { _ = d.Close() })
	c, err := dlock.NewWithDriver(unconfirmedDriver{d}, dlock.WithWaiterLease(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	name := uniqueName(t)
	held := mustLock(t, newClient(t, srv), name)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := lockThenUnlock(ctx, c.Mutex(name))
	waitWaiters(t, c, name, dlock.KindMutex, 1)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter's Lock: %v", err)
		}
		t.Logf("got the lock %v after the release, by polling", time.Since(released))
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter did not get the lock within 15 s of its release: it is stuck waiting for a subscription that is never confirmed")
	}
}

// A wait that ends while its SUBSCRIBE is out but not yet confirmed (here:
// granted by a poll; also a ctx that ends, or a confirmation slower than
// the waiter gives it) must not leave the channel subscribed: the notifier
// forgot the channel while the driver kept it, so the server went on
// sending its messages for good, where a confirmed channel is unsubscribed
// after the 30 s linger.
func TestUnconfirmedSubscriptionIsUnsubscribedAfterTheWait(t *testing.T) {
	t.Parallel() // it waits out the 30 s linger
	srv := redistest.Shared(t)
	opts := []dlock.Option{dlock.WithTTL(10 * time.Second), dlock.WithWaiterLease(600 * time.Millisecond)}
	ctx := testCtx(t)
	name := uniqueName(t)
	rdb := srv.Client(t)
	holder := newClient(t, srv, opts...)
	first, ps := clientWithHeldSubscription(t, srv, holder, name, opts...)

	held := mustLock(t, holder, name)
	got := lockThenUnlock(ctx, first.Mutex(name))
	waitFor(t, 5*time.Second, func() bool { return rdb.PubSubNumSub(ctx, lockKey(name)).Val()[lockKey(name)] == 1 }, "the SUBSCRIBE reached the server")
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Lock by poll: %v", err)
	}
	ps.HoldOpenReplies(false)
	t.Log("waiting out the subscription linger")
	waitFor(t, 40*time.Second, func() bool { return rdb.PubSubNumSub(ctx, lockKey(name)).Val()[lockKey(name)] == 0 },
		"the channel unsubscribed after its last waiter left (else nothing will unsubscribe it)")
}

// gatedDriver is the go-redis driver on a real server, except that its
// subscriptions send nothing until open is closed: a SUBSCRIBE that reaches
// the server only after a release was published.
type gatedDriver struct {
	driver.Driver
	open    chan struct{}
	started chan struct{} // closed at the first Subscribe
	once    *sync.Once
}

func (d gatedDriver) Subscribe(h driver.Handler) driver.Subscription {
	return gatedSubscription{d.Driver.Subscribe(h), d}
}

type gatedSubscription struct {
	driver.Subscription
	d gatedDriver
}

func (s gatedSubscription) Subscribe(ctx context.Context, channels ...string) error {
	s.d.once.Do(func() { close(s.d.started) })
	select {
	case <-s.d.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Subscription.Subscribe(ctx, channels...)
}

// A grant published before the waiter's SUBSCRIBE reached the server is
// never heard: once the subscription is confirmed, the waiter must ask
// again at once rather than at its next poll (10 s away here).
func TestWakeupBeforeTheSubscriptionIsAskedAgain(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	d := goredis.New(rdb)
	t.Cleanup(func() { _ = d.Close() })
	gd := gatedDriver{Driver: d, open: make(chan struct{}), started: make(chan struct{}), once: new(sync.Once)}
	opts := []dlock.Option{dlock.WithTTL(30 * time.Second), dlock.WithWaiterLease(30 * time.Second)}
	c, err := dlock.NewWithDriver(gd, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	name := uniqueName(t)
	held := mustLock(t, newClient(t, srv, opts...), name)

	ctx := testCtx(t)
	got := lockThenUnlock(ctx, c.Mutex(name))
	waitWaiters(t, c, name, dlock.KindMutex, 1)
	<-gd.started
	if err := held.Unlock(ctx); err != nil { // its grant goes unheard
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	opened := time.Now()
	close(gd.open)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter's Lock: %v", err)
		}
		t.Logf("got the lock %v after the subscription went through", time.Since(opened))
	case <-time.After(3 * time.Second):
		t.Fatal("the waiter did not ask again once subscribed: a grant published before its subscription was missed until its next poll")
	}
}

// A wait that ends (its ctx, Close, a grant by poll) while its subscription
// is still being made stops it and waits for it: the call returns at once,
// and goleak (TestMain) finds no goroutine left.
func TestWaitEndsWhileSubscribing(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	for _, how := range []string{"ctx", "close", "poll"} {
		t.Run(how, func(t *testing.T) {
			rdb := srv.Client(t)
			d := goredis.New(rdb)
			t.Cleanup(func() { _ = d.Close() })
			gd := gatedDriver{Driver: d, open: make(chan struct{}), started: make(chan struct{}), once: new(sync.Once)}
			t.Cleanup(func() { close(gd.open) })
			c, err := dlock.NewWithDriver(gd, dlock.WithTTL(30*time.Second), dlock.WithWaiterLease(900*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			name := uniqueName(t)
			held := mustLock(t, newClient(t, srv), name, dlock.WithTTL(30*time.Second))
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			got := make(chan error, 1)
			go func() {
				l, err := c.Mutex(name).Lock(ctx)
				if err == nil {
					err = l.Unlock(context.Background())
				}
				got <- err
			}()
			<-gd.started
			start := time.Now()
			switch how {
			case "ctx":
				cancel()
			case "close":
				_ = c.Close()
			case "poll":
				_ = held.Unlock(ctx) // the grant is heard by the next poll (every 300 ms)
			}
			select {
			case err := <-got:
				t.Logf("%s: Lock returned %v after %v", how, err, time.Since(start))
				if how == "poll" && err != nil {
					t.Errorf("Lock: %v", err)
				}
			case <-time.After(3 * time.Second):
				t.Fatalf("%s: the wait did not end within 3 s while its subscription was held back", how)
			}
			_ = held.Unlock(context.Background())
		})
	}
}
