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

// A lease acts on its own grant only. Once the lock it held vanished
// (ForceUnlock, or its keys deleted, as by eviction or FLUSHALL) and the
// same process, even the same owner, was granted the lock again, the old
// lease's TTL and Extend answer ErrNotHeld and touch nothing, its renewal
// fails so that Done closes with ErrLockLost, and its Unlock leaves the new
// grant held. Every kind of lock is checked, Redlock too.

// grantKind takes one kind of lock on a name; hold is what a test needs of
// the lease it returns.
type grantKind struct {
	kind string
	take func(ctx context.Context, c *dlock.Client, name string, ttl time.Duration) (grantHold, error)
}

// grantHold is a Lease, or Permits, as the tests below use it.
type grantHold interface {
	Done() <-chan struct{}
	Err() error
	TTL(ctx context.Context) (time.Duration, error)
	Extend(ctx context.Context, ttl time.Duration) error
}

// release ends h: Unlock, or Release for Permits.
func release(ctx context.Context, h grantHold) error {
	if p, ok := h.(*dlock.Permits); ok {
		return p.Release(ctx)
	}
	return h.(*dlock.Lease).Unlock(ctx)
}

var grantKinds = []grantKind{
	{"Mutex", func(ctx context.Context, c *dlock.Client, name string, ttl time.Duration) (grantHold, error) {
		return c.Mutex(name, dlock.WithTTL(ttl)).Lock(ctx)
	}},
	{"FairMutex", func(ctx context.Context, c *dlock.Client, name string, ttl time.Duration) (grantHold, error) {
		return c.FairMutex(name, dlock.WithTTL(ttl)).Lock(ctx)
	}},
	{"ReentrantMutex", func(ctx context.Context, c *dlock.Client, name string, ttl time.Duration) (grantHold, error) {
		// The same owner for both grants: the case where only the grant
		// tells them apart.
		return c.ReentrantMutex(name, dlock.WithTTL(ttl)).Lock(dlock.WithOwner(ctx, "job-A"))
	}},
	{"RWMutex.Lock", func(ctx context.Context, c *dlock.Client, name string, ttl time.Duration) (grantHold, error) {
		return c.RWMutex(name, dlock.WithTTL(ttl)).Lock(ctx)
	}},
	{"RWMutex.RLock", func(ctx context.Context, c *dlock.Client, name string, ttl time.Duration) (grantHold, error) {
		return c.RWMutex(name, dlock.WithTTL(ttl)).RLock(ctx)
	}},
	{"Semaphore", func(ctx context.Context, c *dlock.Client, name string, ttl time.Duration) (grantHold, error) {
		return c.Semaphore(name, 1, dlock.WithTTL(ttl)).Acquire(ctx, 1)
	}},
	{"MultiLock", func(ctx context.Context, c *dlock.Client, name string, ttl time.Duration) (grantHold, error) {
		return c.MultiLock(name, name+"-2").With(dlock.WithTTL(ttl)).Lock(ctx)
	}},
}

// vanishings are the ways a held lock disappears under its holder.
var vanishings = []struct {
	how    string
	vanish func(ctx context.Context, t *testing.T, c *dlock.Client, rdb *redis.Client, name string)
}{
	{"ForceUnlock", func(ctx context.Context, t *testing.T, c *dlock.Client, _ *redis.Client, name string) {
		if n, err := c.ForceUnlock(ctx, name); err != nil || n != 1 {
			t.Fatalf("ForceUnlock = %d, %v; want 1 holder released", n, err)
		}
	}},
	{"deleted", func(ctx context.Context, t *testing.T, _ *dlock.Client, rdb *redis.Client, name string) {
		// Every key under the name's tag, as eviction or FLUSHALL would.
		keys, err := rdb.Keys(ctx, "dlock:{"+name+"}*").Result()
		if err != nil || len(keys) == 0 {
			t.Fatalf("KEYS = %v, %v", keys, err)
		}
		if err := rdb.Del(ctx, keys...).Err(); err != nil {
			t.Fatal(err)
		}
	}},
}

// TTL and Extend of the old lease answer ErrNotHeld at once, and leave the
// new grant's key as it was; Unlock of the old lease leaves the new one
// held.
func TestStaleLeaseTTLAndExtendAnswerNotHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	for _, k := range grantKinds {
		for _, v := range vanishings {
			k, v := k, v
			t.Run(k.kind+"/"+v.how, func(t *testing.T) {
				t.Parallel()
				ctx := testCtx(t)
				c := newClient(t, srv)
				rdb := srv.Client(t)
				name := uniqueName(t)
				const ttl = 30 * time.Second // no renewal during the test
				old, err := k.take(ctx, c, name, ttl)
				if err != nil {
					t.Fatal(err)
				}
				v.vanish(ctx, t, c, rdb, name)
				fresh, err := k.take(ctx, c, name, ttl)
				if err != nil {
					t.Fatalf("a new grant after the old vanished: %v", err)
				}
				if _, err := old.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
					t.Errorf("old TTL = %v; want ErrNotHeld", err)
				}
				if err := old.Extend(ctx, 50*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
					t.Errorf("old Extend = %v; want ErrNotHeld", err)
				}
				if d, err := fresh.TTL(ctx); err != nil || d > ttl {
					t.Errorf("new TTL = %v, %v; want at most %v (the old lease's Extend must not touch it)", d, err, ttl)
				}
				if err := release(ctx, old); !errors.Is(err, dlock.ErrNotHeld) {
					t.Errorf("old Unlock = %v; want ErrNotHeld", err)
				}
				if err := fresh.Err(); err != nil {
					t.Errorf("new lease: Err = %v after the old one's Unlock", err)
				}
				if _, err := fresh.TTL(ctx); err != nil {
					t.Errorf("new TTL after the old one's Unlock = %v; want it still held", err)
				}
				if err := release(ctx, fresh); err != nil {
					t.Errorf("new Unlock = %v", err)
				}
			})
		}
	}
}

// The old lease's renewal finds its grant gone: Done closes and Err
// matches ErrLockLost, while the new grant stays held.
func TestStaleLeaseRenewalLosesIt(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	for _, k := range grantKinds {
		k := k
		t.Run(k.kind, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			c := newClient(t, srv)
			name := uniqueName(t)
			old, err := k.take(ctx, c, name, 600*time.Millisecond) // renewed every 200 ms
			if err != nil {
				t.Fatal(err)
			}
			if n, err := c.ForceUnlock(ctx, name); err != nil || n != 1 {
				t.Fatalf("ForceUnlock = %d, %v", n, err)
			}
			const ttl = 5 * time.Second
			fresh, err := k.take(ctx, c, name, ttl)
			if err != nil {
				t.Fatalf("a new grant after ForceUnlock: %v", err)
			}
			defer func() { _ = release(context.Background(), fresh) }()
			select {
			case <-old.Done():
			case <-time.After(20 * time.Second):
				t.Fatalf("the old lease is still not done 20 s after its lock was released under it")
			}
			if err := old.Err(); !errors.Is(err, dlock.ErrLockLost) {
				t.Errorf("old Err = %v; want ErrLockLost", err)
			}
			if err := fresh.Err(); err != nil {
				t.Errorf("new lease: Err = %v", err)
			}
			if d, err := fresh.TTL(ctx); err != nil || d > ttl {
				t.Errorf("new TTL = %v, %v; want it held, at most %v", d, err, ttl)
			}
		})
	}
}

// Redlock leases too: the lock's key deleted on every node, then granted
// again to the same Redlock.
func TestStaleRedlockLeaseAnswersNotHeld(t *testing.T) {
	t.Parallel()
	servers := redistest.StartNodes(t, 3)
	ctx := testCtx(t)
	r := newRedlock(t, addrsOf(servers))
	name := uniqueName(t)
	// A TTL of 10 s gives each node call 100 ms (TTL/100), which a loaded
	// machine meets; the lease is never meant to expire here.
	old, err := r.Mutex(name, dlock.WithTTL(10*time.Second)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		if err := s.Client(t).Del(ctx, lockKey(name)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	fresh, err := r.Mutex(name, dlock.WithTTL(5*time.Second)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = fresh.Unlock(context.Background()) }()
	if _, err := old.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("old TTL = %v; want ErrNotHeld", err)
	}
	if err := old.Extend(ctx, 50*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("old Extend = %v; want ErrNotHeld", err)
	}
	if err := old.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("old Unlock = %v; want ErrNotHeld", err)
	}
	select {
	case <-old.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the old lease is still not done")
	}
	if err := fresh.Err(); err != nil {
		t.Errorf("new lease: Err = %v", err)
	}
	if d, err := fresh.TTL(ctx); err != nil || d > 5*time.Second {
		t.Errorf("new TTL = %v, %v; want held, at most its TTL", d, err)
	}
}
