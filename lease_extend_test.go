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

// extendable is what a held lock or semaphore's permits have in common for
// these tests.
type extendable interface {
	Extend(ctx context.Context, ttl time.Duration) error
	TTL(ctx context.Context) (time.Duration, error)
}

// A renewal whose reply comes too late (its context ended) is still on the
// wire when a later, longer Extend overtakes it on another connection. When
// it lands, it must not cut the hold back to its shorter expiry: the lease
// counts on the longer one, and another client must not take the lock
// while the lease still has time left.
func TestStrayShorterExtendDoesNotShortenTheHold(t *testing.T) {
	t.Parallel()
	kinds := []struct {
		name string
		take func(ctx context.Context, c *dlock.Client, name string) (extendable, error)
	}{
		{"Mutex", func(ctx context.Context, c *dlock.Client, name string) (extendable, error) {
			return c.Mutex(name).TryLock(ctx)
		}},
		{"ReentrantMutex", func(ctx context.Context, c *dlock.Client, name string) (extendable, error) {
			return c.ReentrantMutex(name).TryLock(dlock.WithOwner(ctx, "me"))
		}},
		{"RWMutex", func(ctx context.Context, c *dlock.Client, name string) (extendable, error) {
			return c.RWMutex(name).TryLock(ctx)
		}},
		{"Semaphore", func(ctx context.Context, c *dlock.Client, name string) (extendable, error) {
			return c.Semaphore(name, 1).TryAcquire(ctx, 1)
		}},
	}
	srv := redistest.Start(t)
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			c, _, proxy := clientBehindProxy(t, srv.Addr(), &redis.Options{}, dlock.WithTTL(2*time.Second), dlock.WithAutoRenew(false))
			ctx := testCtx(t)
			held, err := kind.take(ctx, c, t.Name())
			if err != nil {
				t.Fatal(err)
			}
			if err := held.Extend(ctx, 2*time.Second); err != nil { // the script is loaded now
				t.Fatal(err)
			}

			proxy.SetLatency(700 * time.Millisecond)
			sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			err = held.Extend(sctx, 2*time.Second)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Extend slower than its context: got %v, want DeadlineExceeded", err)
			}
			proxy.SetLatency(0)
			before := commandCalls(t, srv, "evalsha")
			if err := held.Extend(ctx, 20*time.Second); err != nil {
				t.Fatalf("Extend(20s) past the stray one: %v", err)
			}
			waitFor(t, 10*time.Second, func() bool {
				return commandCalls(t, srv, "evalsha") >= before+2
			}, "the stray Extend to land")
			if d, err := held.TTL(ctx); err != nil || d < 15*time.Second {
				t.Errorf("after the stray Extend(2s) landed: TTL %v, %v; want over 15s, as Extend(20s) set", d, err)
			}
		})
	}
}

// The same over Redlock, where a renewal returns once a quorum answered or
// its node timeout passed, and requests to slow nodes are left on the wire.
func TestRedlockStrayShorterExtendDoesNotShortenTheHold(t *testing.T) {
	t.Parallel()
	servers := redistest.StartNodes(t, 3)
	proxies, addrs := proxied(t, servers)
	ctx := testCtx(t)
	name := t.Name()
	r := newRedlock(t, addrs, dlock.WithTTL(2*time.Second), dlock.WithAutoRenew(false), dlock.WithNodeTimeout(100*time.Millisecond))
	l := tryLockOnEveryNode(ctx, t, r, servers, name)
	if err := l.Extend(ctx, 2*time.Second); err != nil { // the script is loaded on every node now
		t.Fatal(err)
	}

	proxies[1].SetLatency(700 * time.Millisecond)
	proxies[2].SetLatency(700 * time.Millisecond)
	if err := l.Extend(ctx, 2*time.Second); !errors.Is(err, dlock.ErrQuorum) {
		t.Fatalf("Extend over two slow nodes: got %v, want ErrQuorum", err)
	}
	proxies[1].SetLatency(0)
	proxies[2].SetLatency(0)
	before := make([]int64, len(servers))
	for i, s := range servers {
		before[i] = commandCalls(t, s, "evalsha")
	}
	if err := l.Extend(ctx, 20*time.Second); err != nil {
		t.Fatalf("Extend(20s) past the stray one: %v", err)
	}
	waitFor(t, 10*time.Second, func() bool {
		return commandCalls(t, servers[1], "evalsha") >= before[1]+2 && commandCalls(t, servers[2], "evalsha") >= before[2]+2
	}, "the stray Extends to land")
	for i, s := range servers {
		if d := s.Client(t).PTTL(ctx, lockKey(name)).Val(); d < 15*time.Second {
			t.Errorf("node %d: PTTL %v after the stray Extend(2s) landed, want over 15s, as Extend(20s) set", i, d)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

// An Extend to less than the time left still shortens the hold, as its
// documentation says.
func TestExtendToLessShortens(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(20*time.Second))
	ctx := testCtx(t)
	l, err := c.Mutex(t.Name()).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if err := l.Extend(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if d, err := l.TTL(ctx); err != nil || d > 2*time.Second {
		t.Errorf("after Extend(2s) of a 20s lock: TTL %v, %v; want at most 2s", d, err)
	}
}

// WithMaxHold's cap is a ceiling on the server too: an Extend left on the
// wire that lands late and sets the key past the cap is cut back by the
// next renewal, which the cap shortens.
func TestStrayExtendDoesNotOutliveTheMaxHold(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const ttl, maxHold = 6 * time.Second, 7 * time.Second
	c, _, proxy := clientBehindProxy(t, srv.Addr(), &redis.Options{}, dlock.WithTTL(ttl), dlock.WithMaxHold(maxHold))
	ctx := testCtx(t)
	name := t.Name()
	before := time.Now()
	l, err := c.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	capAt := before.Add(maxHold)
	if err := l.Extend(ctx, ttl); err != nil { // the script is loaded now
		t.Fatal(err)
	}

	// A full-TTL Extend whose context ends on the wire lands 1.5 s later,
	// setting the key to about half a second past the cap.
	proxy.SetLatency(1500 * time.Millisecond)
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = l.Extend(sctx, ttl)
	cancel()
	proxy.SetLatency(0)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Extend slower than its context: got %v, want DeadlineExceeded", err)
	}
	rdb := srv.Client(t)
	expiry := func() time.Time { return time.Now().Add(rdb.PTTL(ctx, lockKey(name)).Val()) }
	// The stray Extend stays in flight until it lands (docs/holding.md, "One
	// expiry request at a time"); the renewal sent then is cut short by the
	// cap and brings the key back to it. Only that renewal sets the key's
	// expiry to the cap: before it, the key expires about a second before
	// the cap (the first Extend's), and the stray alone would set it about
	// half a second past.
	waitFor(t, 10*time.Second, func() bool {
		d := expiry().Sub(capAt)
		return d > -100*time.Millisecond && d < 100*time.Millisecond
	}, "renewal bringing the key back to the cap")
}
