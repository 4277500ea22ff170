package dlock_test

// Redis server configurations production teams run into: maxmemory with
// each eviction policy, and ACL users with too few permissions. Each test
// starts a server of its own, since it changes the server's configuration.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
)

// startOutOfMemory starts a server with the default maxmemory-policy,
// noeviction, for a test to fill with fillMemory.
func startOutOfMemory(t *testing.T) *redistest.Server {
	t.Helper()
	return redistest.Start(t, redistest.WithArgs("--maxmemory-policy", "noeviction"))
}

// fillMemory writes a big key and then lowers maxmemory to half of what the
// server uses, as if the data had grown to the limit: from then on the
// server refuses every command that may grow memory (and a script whose
// first write is one) with OOM, and frees nothing by itself.
func fillMemory(t *testing.T, srv *redistest.Server) {
	t.Helper()
	srv.Do(t, "SET", "filler", strings.Repeat("x", 4<<20))
	srv.Do(t, "CONFIG", "SET", "maxmemory", strconv.FormatInt(usedMemory(t, srv)/2, 10))
}

// usedMemory is the server's used_memory.
func usedMemory(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	info, _ := srv.Do(t, "INFO", "memory").(string)
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("used_memory %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatalf("no used_memory in INFO memory: %q", info)
	return 0
}

// isOOM reports whether err carries the server's OOM reply.
func isOOM(err error) bool {
	var rerr *driver.ReplyError
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Msg, "OOM")
}

// TestOutOfMemoryIsNotAKeyConflict: at maxmemory with noeviction, Redis
// refuses a script whose first write may grow memory. Every acquire says
// so, with the server's OOM reply, at once (a Lock does not wait out its
// deadline for an operator to free memory). Before, the acquires whose
// first write is the fencing counter's INCR (Semaphore, ReentrantMutex,
// MultiLock) read the refusal as a foreign fencing key and returned
// ErrKeyConflict, telling the caller to delete that key.
func TestOutOfMemoryIsNotAKeyConflict(t *testing.T) {
	srv := startOutOfMemory(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	// Every script loaded and every counter started before memory runs out.
	warm := []func() error{
		func() error { l, err := c.Mutex("m").TryLock(ctx); return unlockIf(ctx, l, err) },
		func() error {
			l, err := c.ReentrantMutex("re").TryLock(dlock.WithOwner(ctx, "o"))
			return unlockIf(ctx, l, err)
		},
		func() error { l, err := c.RWMutex("rw").TryLock(ctx); return unlockIf(ctx, l, err) },
		func() error { l, err := c.MultiLock("a", "b").TryLock(ctx); return unlockIf(ctx, l, err) },
		func() error {
			p, err := c.Semaphore("sem", 2).TryAcquire(ctx, 1)
			if err != nil {
				return err
			}
			return p.Release(ctx)
		},
	}
	for _, f := range warm {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	fillMemory(t, srv)

	short := func() context.Context {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	calls := map[string]func() error{
		"Mutex.TryLock":          func() error { _, err := c.Mutex("m").TryLock(ctx); return err },
		"Mutex.Lock":             func() error { _, err := c.Mutex("m").Lock(short()); return err },
		"FairMutex.Lock":         func() error { _, err := c.FairMutex("m").Lock(short()); return err },
		"ReentrantMutex.TryLock": func() error { _, err := c.ReentrantMutex("re").TryLock(dlock.WithOwner(ctx, "o")); return err },
		"ReentrantMutex.Lock":    func() error { _, err := c.ReentrantMutex("re").Lock(dlock.WithOwner(short(), "o")); return err },
		"RWMutex.TryLock":        func() error { _, err := c.RWMutex("rw").TryLock(ctx); return err },
		"RWMutex.RLock":          func() error { _, err := c.RWMutex("rw").RLock(short()); return err },
		"MultiLock.TryLock":      func() error { _, err := c.MultiLock("a", "b").TryLock(ctx); return err },
		"MultiLock.Lock":         func() error { _, err := c.MultiLock("a", "b").Lock(short()); return err },
		"Semaphore.TryAcquire":   func() error { _, err := c.Semaphore("sem", 2).TryAcquire(ctx, 1); return err },
		"Semaphore.Acquire":      func() error { _, err := c.Semaphore("sem", 2).Acquire(short(), 1); return err },
	}
	for name, call := range calls {
		start := time.Now()
		err := call()
		took := time.Since(start)
		switch {
		case err == nil:
			t.Errorf("%s: nil error at maxmemory", name)
		case errors.Is(err, dlock.ErrKeyConflict):
			t.Errorf("%s: %v: matches ErrKeyConflict, but no key is foreign: Redis is out of memory", name, err)
		case errors.Is(err, dlock.ErrNotObtained):
			t.Errorf("%s: %v: matches ErrNotObtained, but nobody holds the lock", name, err)
		case !isOOM(err):
			t.Errorf("%s: %v: no OOM reply in the error", name, err)
		case took > 5*time.Second:
			t.Errorf("%s: returned after %v; want at once", name, took)
		}
	}
}

// unlockIf unlocks l when err is nil, returning err or Unlock's error.
func unlockIf(ctx context.Context, l *dlock.Lease, err error) error {
	if err != nil {
		return err
	}
	return l.Unlock(ctx)
}

// TestUnlockAtMaxMemoryWithLocalWaiters: a holder can Unlock at maxmemory
// when goroutines of its own Client wait for the lock. The local hand-off's
// script starts with the fencing counter's INCR, which Redis refuses then;
// Unlock now releases through the queue in Redis instead, whose first write
// frees memory. Before, Unlock failed (as a key conflict), a retried Unlock
// failed the same way, and the lock stayed held for its whole TTL.
func TestUnlockAtMaxMemoryWithLocalWaiters(t *testing.T) {
	srv := startOutOfMemory(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	const name = "local-handoff"
	held := mustLock(t, c, name)
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	results := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			l, err := c.Mutex(name).Lock(waitCtx)
			if err == nil {
				err = l.Unlock(ctx)
			}
			results <- err
		}()
		waitUntil(t, 10*time.Second, "the waiter in line", func() bool { return dlock.LocalWaiters(c, name) == i+1 })
	}
	fillMemory(t, srv)

	if err := held.Unlock(ctx); err != nil {
		t.Fatalf("Unlock at maxmemory with local waiters: %v", err)
	}
	if err := held.Err(); !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("after Unlock, Err = %v; want ErrNotHeld (released), not a loss", err)
	}
	if v := srv.Do(t, "GET", lockKey(name)); v == dlock.LeaseOwner(held) {
		t.Errorf("the lock key still holds the released lease's owner")
	}
	// The waiters end by themselves, well before their deadline: the one
	// handed the lock takes and releases it, and an acquire that Redis
	// refuses for want of memory fails at once.
	for i := 0; i < 2; i++ {
		if err := <-results; err != nil && !isOOM(err) {
			t.Errorf("waiter: %v; want nil or Redis's OOM refusal", err)
		}
	}
}

// aclClient creates the ACL user name with rules (after "reset on >pw")
// and returns a go-redis client that logs in as it.
func aclClient(t *testing.T, srv *redistest.Server, name string, rules ...any) *redis.Client {
	t.Helper()
	srv.Do(t, append([]any{"ACL", "SETUSER", name, "reset", "on", ">pw"}, rules...)...)
	opts := srv.Options()
	opts.Username, opts.Password = name, "pw"
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// pubsubDenied are ACL users that may run every command on every key but
// cannot publish or subscribe: one denied the commands, and one given no
// channels, which is what Redis 7 gives a user created with ACL SETUSER
// unless acl-pubsub-default says otherwise.
var pubsubDenied = map[string][]any{
	"no-pubsub-commands": {"~*", "&*", "+@all", "-publish", "-spublish", "-subscribe", "-ssubscribe"},
	"no-channels":        {"~*", "resetchannels", "+@all"},
}

// TestReleaseWhenPublishIsDenied: a holder whose Redis user may not publish
// still releases, hands the lock to the next waiter (who learns of it by
// polling), and counts a latch down to zero. The scripts wrote the grant and
// then failed on PUBLISH: Unlock and Release returned an error, their
// leases were reported lost although the release had landed, and the last
// CountDown failed although it had counted.
func TestReleaseWhenPublishIsDenied(t *testing.T) {
	srv := redistest.Start(t)
	for user, rules := range pubsubDenied {
		t.Run(user, func(t *testing.T) {
			c, err := dlock.New(aclClient(t, srv, user, rules...))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			other := newClient(t, srv)
			ctx := testCtx(t)

			kinds := []struct {
				kind  string
				queue string
				hold  func() (release func() error, l *dlock.Lease)
				wait  func(context.Context) error
			}{
				{"Mutex", "dlock:{" + user + "-m}:q",
					func() (func() error, *dlock.Lease) {
						l := mustLock(t, c, user+"-m")
						return func() error { return l.Unlock(ctx) }, l
					},
					func(ctx context.Context) error {
						l, err := other.Mutex(user + "-m").Lock(ctx)
						return unlockIf(ctx, l, err)
					}},
				{"RWMutex", "dlock:{" + user + "-rw}:rw:q",
					func() (func() error, *dlock.Lease) {
						l, err := c.RWMutex(user + "-rw").Lock(ctx)
						if err != nil {
							t.Fatal(err)
						}
						return func() error { return l.Unlock(ctx) }, l
					},
					func(ctx context.Context) error {
						l, err := other.RWMutex(user + "-rw").RLock(ctx)
						return unlockIf(ctx, l, err)
					}},
				{"Semaphore", "dlock:{" + user + "-sem}:sem:q",
					func() (func() error, *dlock.Lease) {
						p, err := c.Semaphore(user+"-sem", 1).Acquire(ctx, 1)
						if err != nil {
							t.Fatal(err)
						}
						return func() error { return p.Release(ctx) }, dlock.PermitsLease(p)
					},
					func(ctx context.Context) error {
						p, err := other.Semaphore(user+"-sem", 1).Acquire(ctx, 1)
						if err != nil {
							return err
						}
						return p.Release(ctx)
					}},
			}
			for _, k := range kinds {
				release, l := k.hold()
				waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
				waited := make(chan error, 1)
				go func() { waited <- k.wait(waitCtx) }()
				waitUntil(t, 10*time.Second, k.kind+" waiter queued", func() bool {
					n, _ := srv.Do(t, "ZCARD", k.queue).(int64)
					return n == 1
				})
				if err := release(); err != nil {
					t.Errorf("%s: release with a waiter: %v", k.kind, err)
				}
				if err := l.Err(); errors.Is(err, dlock.ErrLockLost) {
					t.Errorf("%s: after the release, Err = %v; want no loss", k.kind, err)
				}
				if err := <-waited; err != nil {
					t.Errorf("%s: the waiter: %v", k.kind, err)
				}
				cancel()
			}

			latch := c.Latch(user + "-latch")
			if ok, err := latch.TrySetCount(ctx, 1); !ok || err != nil {
				t.Fatalf("TrySetCount = %v, %v", ok, err)
			}
			if err := latch.CountDown(ctx); err != nil {
				t.Errorf("the last CountDown: %v", err)
			}
			if n, err := other.Latch(user + "-latch").Count(ctx); n != 0 || err != nil {
				t.Errorf("Count after the last CountDown = %d, %v; want 0", n, err)
			}
		})
	}
}

// TestRenewalAtMaxMemory: at maxmemory with noeviction, every kind of lease
// can still be renewed, downgraded and released, since none of these grows
// memory. Before, a read-write lock's and a semaphore's renewal began with
// ZADD, which Redis refuses as a script's first write then: Extend failed,
// the watchdog's renewals too, and such leases were lost one TTL after
// memory ran out while Mutexes renewed on.
func TestRenewalAtMaxMemory(t *testing.T) {
	srv := startOutOfMemory(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	m := mustLock(t, c, "m")
	re, err := c.ReentrantMutex("re").Lock(dlock.WithOwner(ctx, "o"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.RWMutex("r").RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.RWMutex("w").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Semaphore("sem", 3).Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	fillMemory(t, srv)

	leases := map[string]*dlock.Lease{"Mutex": m, "ReentrantMutex": re, "RWMutex.RLock": r, "RWMutex.Lock": w, "Semaphore": dlock.PermitsLease(p)}
	for kind, l := range leases {
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Errorf("%s: Extend at maxmemory: %v", kind, err)
		}
	}
	if err := p.ReleaseN(ctx, 1); err != nil {
		t.Errorf("Semaphore: ReleaseN at maxmemory: %v", err)
	}
	down, err := c.RWMutex("w").Downgrade(ctx, w)
	if err != nil {
		t.Errorf("RWMutex: Downgrade at maxmemory: %v", err)
	} else {
		leases["RWMutex.RLock after Downgrade"] = down
	}
	delete(leases, "RWMutex.Lock")
	for kind, l := range leases {
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("%s: Unlock at maxmemory: %v", kind, err)
		}
	}
}
