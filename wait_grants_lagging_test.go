package dlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// splitClient sends commands through one go-redis client and subscribes
// through another, so that a test can fault the two paths apart.
type splitClient struct {
	*redis.Client
	sub *redis.Client
}

func (s splitClient) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	return s.sub.Subscribe(ctx, channels...)
}

// A waiter's grant can be heard long after it was made: its subscription
// lags (bytes delayed on a live connection) while its commands fail for
// longer than the claim window, so the grant expires unclaimed and another
// client takes the lock. The waiter's commands then work again: its next
// attempt finds that holder and queues the same owner again. When the old
// grant's message finally arrives, the waiter must not take it for a new
// one, which would count its validity from after that attempt and return
// a live lease while the other client holds the lock. Every kind that
// waits in a queue is checked.
func TestGrantHeardAfterALaterAttemptIsIgnored(t *testing.T) {
	srv := redistest.Shared(t)
	for _, k := range laggingKinds {
		k := k
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			testGrantHeardLate(t, srv, k)
		})
	}
}

// testGrantHeardLate runs TestGrantHeardAfterALaterAttemptIsIgnored for k.
func testGrantHeardLate(t *testing.T, srv *redistest.Server, k laggingKind) {
	// A claim window of 1 s: the waiter lease (the TTL is longer).
	opts := []dlock.Option{dlock.WithTTL(10 * time.Second), dlock.WithWaiterLease(time.Second)}
	ctx := testCtx(t)
	name := uniqueName(t)
	rdb := srv.Client(t)
	a, x := newClient(t, srv, opts...), newClient(t, srv, opts...)

	w, pc, ps, ignored := newSplitClient(t, srv, name, opts)

	held, err := k.lock(ctx, a, name)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		got heldGrant
		err error
	}
	waited := make(chan result, 1)
	go func() {
		got, err := k.lock(ctx, w, name)
		waited <- result{got, err}
	}()
	waitFor(t, 10*time.Second, func() bool {
		return rdb.ZCard(ctx, k.queue(name)).Val() == 1 && subscribedFor(ctx, rdb, k.queue(name)[:len(k.queue(name))-2])
	}, "waiter queued and subscribed")

	ps.HoldReplies(true) // the grant will be heard late
	pc.Blackhole(true)   // and the waiter cannot ask meanwhile
	held.release()       // grants the waiter, for its 1 s claim window
	var other heldGrant
	waitFor(t, 10*time.Second, func() bool {
		got, err := k.try(ctx, x, name)
		other = got
		return err == nil
	}, "the lock for another client once the unclaimed grant expired")
	pc.Blackhole(false)
	waitFor(t, 10*time.Second, func() bool {
		return rdb.ZCard(ctx, k.queue(name)).Val() == 1
	}, "the waiter queued again behind the new holder")
	ps.HoldReplies(false) // the old grant arrives now

	select {
	case r := <-waited:
		select {
		case <-other.done:
		default:
			if r.err == nil {
				t.Fatalf("TWO HOLDERS: the waiter took the late grant while another client holds the lock")
			}
		}
		t.Fatalf("the waiter's %s returned (%v) before the holder released", k.name, r.err)
	case <-ignored.lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the late grant was neither taken nor ignored within 10 s")
	}
	select {
	case r := <-waited:
		t.Fatalf("the waiter's %s returned (%v) while another client holds the lock", k.name, r.err)
	default:
	}
	other.release()
	select {
	case r := <-waited:
		if r.err != nil {
			t.Fatalf("the waiter's %s after the holder released: %v", k.name, r.err)
		}
		select {
		case <-r.got.done:
			t.Error("the waiter's lease is already over")
		default:
		}
		r.got.release()
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not granted the lock within 10 s of its release")
	}
}

// newSplitClient returns a Client with opts whose commands go through the
// proxy pc, and fail fast when it is cut, and whose pub/sub goes through
// ps; ignored hears it log that it ignored a late grant of name.
func newSplitClient(t *testing.T, srv *redistest.Server, name string, opts []dlock.Option) (w *dlock.Client, pc, ps *redistest.Proxy, ignored *lossSignal) {
	pc, ps = redistest.StartProxy(t, srv.Addr()), redistest.StartProxy(t, srv.Addr())
	cmd := redis.NewClient(&redis.Options{Addr: pc.Addr(), ReadTimeout: 100 * time.Millisecond,
		WriteTimeout: 100 * time.Millisecond, DialTimeout: 100 * time.Millisecond})
	sub := redis.NewClient(&redis.Options{Addr: ps.Addr()})
	t.Cleanup(func() { _ = cmd.Close(); _ = sub.Close() })
	ignored = &lossSignal{name: name, message: "dlock: ignoring a grant heard after a later attempt found the lock taken", lost: make(chan struct{})}
	w, err := dlock.New(splitClient{Client: cmd, sub: sub}, append(opts, dlock.WithLogger(slog.New(ignored)))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w, pc, ps, ignored
}

// heldGrant is a lock or permits held: when they end, and how to give
// them back.
type heldGrant struct {
	done    <-chan struct{}
	release func()
}

// laggingKind is a queued kind under test: its queue key, a waiting and a
// single attempt.
type laggingKind struct {
	name      string
	queue     func(name string) string // the queue key
	lock, try func(ctx context.Context, c *dlock.Client, name string) (heldGrant, error)
}

// fromLease and fromPermits make a heldGrant of an acquisition.
func fromLease(l *dlock.Lease, err error) (heldGrant, error) {
	if err != nil {
		return heldGrant{}, err
	}
	return heldGrant{l.Done(), func() { _ = l.Unlock(context.Background()) }}, nil
}

func fromPermits(p *dlock.Permits, err error) (heldGrant, error) {
	if err != nil {
		return heldGrant{}, err
	}
	return heldGrant{p.Done(), func() { _ = p.Release(context.Background()) }}, nil
}

// laggingKinds are the queued kinds whose waiters may hear a grant late.
var laggingKinds = []laggingKind{
	{"Mutex", func(n string) string { return lockKey(n) + ":q" },
		func(ctx context.Context, c *dlock.Client, n string) (heldGrant, error) {
			return fromLease(c.Mutex(n).Lock(ctx))
		},
		func(ctx context.Context, c *dlock.Client, n string) (heldGrant, error) {
			return fromLease(c.Mutex(n).TryLock(ctx))
		}},
	{"FairMutex", func(n string) string { return lockKey(n) + ":q" },
		func(ctx context.Context, c *dlock.Client, n string) (heldGrant, error) {
			return fromLease(c.FairMutex(n).Lock(ctx))
		},
		func(ctx context.Context, c *dlock.Client, n string) (heldGrant, error) {
			return fromLease(c.FairMutex(n).TryLock(ctx))
		}},
	{"ReentrantMutex", func(n string) string { return "dlock:{" + n + "}:re:q" },
		func(ctx context.Context, c *dlock.Client, n string) (heldGrant, error) {
			return fromLease(c.ReentrantMutex(n).Lock(dlock.WithOwner(ctx, fmt.Sprintf("%p", c))))
		},
		func(ctx context.Context, c *dlock.Client, n string) (heldGrant, error) {
			return fromLease(c.ReentrantMutex(n).TryLock(dlock.WithOwner(ctx, fmt.Sprintf("%p", c))))
		}},
	{"RWMutex", func(n string) string { return "dlock:{" + n + "}:rw:q" },
		func(ctx context.Context, c *dlock.Client, n string) (heldGrant, error) {
			return fromLease(c.RWMutex(n).Lock(ctx))
		},
		func(ctx context.Context, c *dlock.Client, n string) (heldGrant, error) {
			return fromLease(c.RWMutex(n).TryLock(ctx))
		}},
	{"Semaphore", func(n string) string { return "dlock:{" + n + "}:sem:q" },
		func(ctx context.Context, c *dlock.Client, n string) (heldGrant, error) {
			return fromPermits(c.Semaphore(n, 1).Acquire(ctx, 1))
		},
		func(ctx context.Context, c *dlock.Client, n string) (heldGrant, error) {
			return fromPermits(c.Semaphore(n, 1).TryAcquire(ctx, 1))
		}},
}
