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
// deadline for an operator to free memory). The acquires whose first write
// is the fencing counter's INCR (Semaphore, ReentrantMutex, MultiLock) must
// not read the refusal as a foreign fencing key and return ErrKeyConflict,
// telling the caller to delete that key.
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
		case !strings.Contains(err.Error(), "raise maxmemory"):
			t.Errorf("%s: %v: the error does not say what to do", name, err)
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
// frees memory, rather than failing (as a key conflict) however often it
// is retried while the lock stays held for its whole TTL.
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
		waitFor(t, 10*time.Second, func() bool { return dlock.LocalWaiters(c, name) == i+1 }, "the waiter in line")
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

// TestWaiterRefusedAtMaxMemoryLeavesTheQueue: a waiter whose poll Redis
// refuses for want of memory gives up with that error and takes its place
// out of the lock's queue. A clean-up that skipped error replies would
// leave the place its earlier polls took: the holder's release would hand
// the lock to a waiter that had gone, and the lock would sit unused for a
// claim window.
func TestWaiterRefusedAtMaxMemoryLeavesTheQueue(t *testing.T) {
	srv := startOutOfMemory(t)
	holder := newClient(t, srv)
	waiter := newClient(t, srv, dlock.WithWaiterLease(time.Minute))
	ctx := testCtx(t)
	const name = "refused-waiter"
	held := mustLock(t, holder, name)
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	result := make(chan error, 1)
	go func() {
		l, err := waiter.Mutex(name, dlock.WithWaitStrategy(dlock.SpinWait(10*time.Millisecond, 50*time.Millisecond))).Lock(waitCtx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		result <- err
	}()
	queue := lockKey(name) + ":q"
	waitFor(t, 10*time.Second, func() bool { return srv.Do(t, "ZCARD", queue) == int64(1) }, "the waiter in the queue")
	fillMemory(t, srv)

	if err := <-result; !isOOM(err) {
		t.Fatalf("waiter at maxmemory: %v; want Redis's OOM refusal", err)
	}
	waitFor(t, 10*time.Second, func() bool { return srv.Do(t, "ZCARD", queue) == int64(0) }, "the refused waiter's place removed")
	if err := held.Unlock(ctx); err != nil {
		t.Fatalf("Unlock at maxmemory: %v", err)
	}
	if v := srv.Do(t, "GET", lockKey(name)); v != nil {
		t.Errorf("after Unlock the lock key holds %v; want it gone, nobody is waiting", v)
	}
}

// TestRenewalAtMaxMemory: at maxmemory with noeviction, every kind of lease
// can still be renewed, downgraded and released, since none of these grows
// memory. A renewal that began with ZADD, which Redis refuses as a
// script's first write then, would fail, and such leases would be lost one
// TTL after memory ran out while Mutexes renewed on.
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

// TestEvictedLockIsReportedLost: under a maxmemory-policy that evicts, a
// lock's keys can go like any other (volatile-* policies too: every key of
// dlock has an expiry). A holder whose key was evicted learns it at its next
// renewal (Done closes, Err matches ErrLockLost); a waiter whose queue was
// evicted with it takes the lock by polling; and its fencing token is still
// higher than the evicted holder's, since a fencing counter that is gone
// starts again at the server clock in µs, far ahead of any counter.
func TestEvictedLockIsReportedLost(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"allkeys-lru", "allkeys-random", "volatile-lru", "volatile-ttl"} {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.Start(t, redistest.WithArgs("--maxmemory-policy", policy))
			const name = "evicted"
			ttl := dlock.WithTTL(900 * time.Millisecond)
			c := newClient(t, srv, ttl)
			other := newClient(t, srv, ttl)
			ctx := testCtx(t)
			held := mustLock(t, c, name)
			waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			next := make(chan *dlock.Lease, 1)
			go func() {
				l, err := other.Mutex(name).Lock(waitCtx)
				for isOOM(err) {
					// A poll that came while maxmemory was 1, below: Redis
					// refuses an acquire then, and Lock says so at once.
					l, err = other.Mutex(name).Lock(waitCtx)
				}
				if err != nil {
					t.Errorf("waiter: %v", err)
				}
				next <- l
			}()
			waitFor(t, 10*time.Second, func() bool {
				n, _ := srv.Do(t, "ZCARD", "dlock:{"+name+"}:q").(int64)
				return n == 1
			}, "the waiter queued")

			// A limit below what an empty server uses: the next command
			// makes Redis evict every key the policy allows, then the
			// limit goes back. Keys are counted before that: the waiter's
			// next poll may write again afterwards.
			srv.Do(t, "CONFIG", "SET", "maxmemory", "1")
			_ = srv.Client(t).Ping(ctx).Err()
			left, _ := srv.Do(t, "DBSIZE").(int64)
			srv.Do(t, "CONFIG", "SET", "maxmemory", "0")
			if left != 0 {
				t.Fatalf("%d keys left after eviction; want none", left)
			}

			waitDone(t, held, 10*time.Second)
			if err := held.Err(); !errors.Is(err, dlock.ErrLockLost) {
				t.Errorf("Err after the key was evicted = %v; want ErrLockLost", err)
			}
			l := <-next
			if l == nil {
				return
			}
			if l.Token() <= held.Token() {
				t.Errorf("token after the fencing counter was evicted = %d; want more than the evicted holder's %d", l.Token(), held.Token())
			}
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("Unlock: %v", err)
			}
		})
	}
}

// TestRefusedFenceLeavesNothingHeld: when Redis refuses the INCR that
// issues a fencing token (an ACL here; maxmemory refuses a script's first
// write the same way), every primitive's acquire fails with that refusal
// and writes nothing first. The RWMutex wrote its holder before the token,
// and so stayed held by nobody for a TTL after the failed TryLock.
func TestRefusedFenceLeavesNothingHeld(t *testing.T) {
	srv := redistest.Start(t)
	c := newACLClient(t, srv, "no-incr", []any{"~*", "&*", "+@all", "-incr"})
	ctx := testCtx(t)
	acquires := map[string]func() error{
		"Mutex":          func() error { _, err := c.Mutex("m").TryLock(ctx); return err },
		"FairMutex":      func() error { _, err := c.FairMutex("f").TryLock(ctx); return err },
		"ReentrantMutex": func() error { _, err := c.ReentrantMutex("r").TryLock(dlock.WithOwner(ctx, "o")); return err },
		"RWMutex.Lock":   func() error { _, err := c.RWMutex("w").TryLock(ctx); return err },
		"RWMutex.RLock":  func() error { _, err := c.RWMutex("rl").TryRLock(ctx); return err },
		"Semaphore":      func() error { _, err := c.Semaphore("s", 2).TryAcquire(ctx, 1); return err },
		"MultiLock":      func() error { _, err := c.MultiLock("{ml}a", "{ml}b").TryLock(ctx); return err },
	}
	for what, acquire := range acquires {
		err := acquire()
		var rerr *driver.ReplyError
		if !errors.As(err, &rerr) || errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("%s: %v; want the server's refusal", what, err)
		}
		if keys, _ := srv.Do(t, "KEYS", "*").([]any); len(keys) != 0 {
			t.Errorf("%s: the refused acquire left %v", what, keys)
			srv.Do(t, "FLUSHALL")
		}
	}

	// A MultiLock refused the token of its second lock takes neither. (It
	// took the first before it asked for the second's token, and only the
	// Client's clean-up after the error released it.) ACL selectors,
	// Redis 7: INCR is allowed on the first fencing key only.
	admin := redis.NewClient(srv.Options())
	t.Cleanup(func() { _ = admin.Close() })
	incrOnA := []any{"~*", "&*", "+@all", "-incr", "(~dlock:{a}:fence +incr)"}
	if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", "incr-on-a"}, incrOnA...)...).Err(); err != nil {
		t.Logf("no ACL selectors (%v): the MultiLock's second token is not refused alone", err)
	} else {
		mc := newACLClient(t, srv, "incr-on-a", incrOnA)
		if _, err := mc.MultiLock("a", "b").TryLock(ctx); err == nil {
			t.Error("MultiLock without INCR on b's fencing key: TryLock succeeded; want the refusal")
		}
		if v := srv.Do(t, "GET", "dlock:{a}"); v != nil {
			t.Errorf("the refused MultiLock left lock a held by %v", v)
		}
	}

	// A Downgrade refused its reader's token leaves the writer holding.
	// It dropped the writer first, so the write lease was lost too.
	wc := newACLClient(t, srv, "incr-then-not", []any{"~*", "&*", "+@all"})
	write, err := wc.RWMutex("d").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Do(t, "ACL", "SETUSER", "incr-then-not", "-incr")
	if read, err := wc.RWMutex("d").Downgrade(ctx, write); err == nil {
		t.Errorf("Downgrade without INCR returned a read lease (token %d); want the refusal", read.Token())
	}
	if err := write.Unlock(ctx); err != nil {
		t.Errorf("the writer's Unlock after a refused Downgrade: %v", err)
	}
}
