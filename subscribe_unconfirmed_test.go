package dlock_test

import (
	"context"
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
	got := make(chan error, 1)
	go func() {
		l, err := c.Mutex(name).Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
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
