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

// A foreign value under a lock's queue keys (:q, the queue zset, and :w,
// the waiters hash) must never keep a lock held after its owner released
// it, nor make dlock leave a key of its own without an expiry.

// queuedKind is a queued lock under test: the Mutex and the FairMutex share
// mutex_acquire.lua and mutex_release.lua, the Mutex outside strict order
// (its free-lock path never reads the queue keys).
type queuedKind struct {
	name    string
	tryLock func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lease, error)
	lock    func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lease, error)
}

var queuedKinds = []queuedKind{
	{
		name: "Mutex",
		tryLock: func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lease, error) {
			return c.Mutex(name).TryLock(ctx)
		},
		lock: func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lease, error) {
			return c.Mutex(name).Lock(ctx)
		},
	},
	{
		name: "FairMutex",
		tryLock: func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lease, error) {
			return c.FairMutex(name).TryLock(ctx)
		},
		lock: func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lease, error) {
			return c.FairMutex(name).Lock(ctx)
		},
	},
}

// queueForeignValue is something another program may have written under a key.
type queueForeignValue struct {
	name string
	set  func(ctx context.Context, rdb *redis.Client, key string) error
}

var foreignQueueValues = []queueForeignValue{
	{"string", func(ctx context.Context, rdb *redis.Client, key string) error { return rdb.Set(ctx, key, "x", 0).Err() }},
	{"list", func(ctx context.Context, rdb *redis.Client, key string) error { return rdb.RPush(ctx, key, "a").Err() }},
}

// foreignTestKeys returns the keys dlock keeps for lock name.
func foreignTestKeys(name string) (lock, fence, queue, waiters string) {
	k := lockKey(name)
	return k, k + ":fence", k + ":q", k + ":w"
}

// clearLockKeys deletes name's keys now and when the test ends.
func clearLockKeys(t *testing.T, rdb *redis.Client, name string) {
	t.Helper()
	lock, fence, queue, waiters := foreignTestKeys(name)
	del := func() { rdb.Del(context.Background(), lock, fence, queue, waiters) }
	del()
	t.Cleanup(del)
}

// setForeign writes v under key and returns the key's DUMP, to prove later
// that nothing touched it.
func setForeign(t *testing.T, ctx context.Context, rdb *redis.Client, key string, v queueForeignValue) string {
	t.Helper()
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := v.set(ctx, rdb, key); err != nil {
		t.Fatal(err)
	}
	dump, err := rdb.Dump(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return dump
}

// checkForeignUntouched fails the test unless key still holds what
// setForeign wrote, with no expiry.
func checkForeignUntouched(t *testing.T, ctx context.Context, rdb *redis.Client, key, dump string) {
	t.Helper()
	if got, err := rdb.Dump(ctx, key).Result(); err != nil || got != dump {
		t.Errorf("the foreign key %s was modified (DUMP err %v)", key, err)
	}
	if pttl := rdb.PTTL(ctx, key).Val(); pttl != -1 {
		t.Errorf("the foreign key %s got an expiry (%v)", key, pttl)
	}
}

// checkLockConflictsAtOnce checks that a waiting Lock of kind on name
// through c (what, in messages) reports ErrKeyConflict at once, without
// waiting for the lock.
func checkLockConflictsAtOnce(t *testing.T, ctx context.Context, kind queuedKind, c *dlock.Client, name, what string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := kind.lock(wctx, c, name)
	if !errors.Is(err, dlock.ErrKeyConflict) {
		t.Errorf("%s: got %v, want ErrKeyConflict", what, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("%s took %v to report the conflict", what, took)
	}
}

// checkExpiries fails the test if a key of name's, other than foreign,
// exists without an expiry: dlock writes none that way.
func checkExpiries(t *testing.T, ctx context.Context, rdb *redis.Client, name, foreign string) {
	t.Helper()
	lock, fence, queue, waiters := foreignTestKeys(name)
	for _, key := range []string{lock, fence, queue, waiters} {
		if key == foreign {
			continue
		}
		n, err := rdb.Exists(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			continue
		}
		if pttl := rdb.PTTL(ctx, key).Val(); pttl <= 0 {
			t.Errorf("dlock's key %s (%s) is left without an expiry (PTTL %v)", key, rdb.Type(ctx, key).Val(), pttl)
		}
	}
}

// The owner's Unlock frees its lock although a queue key holds something
// no lock wrote, and reports the conflict. A Mutex's free-lock acquire does
// not read the queue, so the foreign value may be there before the lock is
// taken; a FairMutex's does, so for it the value comes while the lock is
// held (it would refuse the acquire otherwise, tested below).
func TestForeignQueueKeyUnlockFreesLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	for _, kind := range queuedKinds {
		for _, v := range foreignQueueValues {
			t.Run(kind.name+"/"+v.name, func(t *testing.T) {
				c := newClient(t, srv)
				name := t.Name()
				lockK, fenceK, queueK, waitersK := foreignTestKeys(name)
				clearLockKeys(t, rdb, name)

				var dump string
				if kind.name == "Mutex" {
					dump = setForeign(t, ctx, rdb, queueK, v)
				}
				l, err := kind.tryLock(ctx, c, name)
				if err != nil {
					t.Fatalf("TryLock: %v", err)
				}
				if kind.name != "Mutex" {
					dump = setForeign(t, ctx, rdb, queueK, v)
				}

				err = l.Unlock(ctx)
				t.Logf("Unlock: %v", err)
				if !errors.Is(err, dlock.ErrKeyConflict) {
					t.Errorf("Unlock: got %v, want ErrKeyConflict", err)
				}
				if n := rdb.Exists(ctx, lockK).Val(); n != 0 {
					t.Errorf("the owner's Unlock left the lock held (PTTL %v) although it released it", rdb.PTTL(ctx, lockK).Val())
				}
				// The lock is free: the lease has ended, as after any Unlock.
				select {
				case <-l.Done():
				default:
					t.Errorf("lease after an Unlock that released the lock: Done still open (Err %v)", l.Err())
				}
				if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrLockLost) {
					t.Errorf("lease after Unlock: Err %v, want ErrNotHeld (released)", err)
				}
				if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
					t.Errorf("a second Unlock of the ended lease: got %v, want ErrNotHeld", err)
				}
				checkForeignUntouched(t, ctx, rdb, queueK, dump)
				if n := rdb.Exists(ctx, waitersK).Val(); n != 0 {
					t.Errorf("%s was written", waitersK)
				}
				if pttl := rdb.PTTL(ctx, fenceK).Val(); pttl <= 0 {
					t.Errorf("the fencing key has PTTL %v", pttl)
				}
				checkExpiries(t, ctx, rdb, name, queueK)

				// The lock is free again: a Mutex takes it past the foreign
				// queue; a FairMutex, which reads the queue first, reports
				// the conflict and writes nothing. A waiting Lock reports it
				// too, at once, without joining the queue.
				other := newClient(t, srv)
				l2, err := kind.tryLock(ctx, other, name)
				switch kind.name {
				case "Mutex":
					if err != nil {
						t.Fatalf("TryLock after the release: %v", err)
					}
					checkLockConflictsAtOnce(t, ctx, kind, c, name, "Lock while held")
					if err := l2.Unlock(ctx); !errors.Is(err, dlock.ErrKeyConflict) {
						t.Errorf("second Unlock: got %v, want ErrKeyConflict", err)
					}
				default:
					if !errors.Is(err, dlock.ErrKeyConflict) {
						t.Errorf("TryLock: got %v, want ErrKeyConflict", err)
					}
					checkLockConflictsAtOnce(t, ctx, kind, other, name, "Lock")
				}
				if n := rdb.Exists(ctx, lockK, waitersK).Val(); n != 0 {
					t.Errorf("%d of %s, %s left behind", n, lockK, waitersK)
				}
				checkForeignUntouched(t, ctx, rdb, queueK, dump)
				checkExpiries(t, ctx, rdb, name, queueK)
			})
		}
	}
}

// A foreign string under the waiters key: a Lock that has to wait reports
// the conflict before it writes anything (adding itself to the queue first
// would leave a queue without an expiry that made every later Unlock of the
// name fail), and the holder's Unlock then succeeds.
func TestForeignWaitersKeyLeavesNoQueue(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	for _, kind := range queuedKinds {
		t.Run(kind.name, func(t *testing.T) {
			a := newClient(t, srv)
			b := newClient(t, srv)
			name := t.Name()
			lockK, _, queueK, waitersK := foreignTestKeys(name)
			clearLockKeys(t, rdb, name)
			dump := setForeign(t, ctx, rdb, waitersK, foreignQueueValues[0])

			la, err := kind.tryLock(ctx, a, name)
			if err != nil {
				t.Fatalf("A TryLock: %v", err)
			}
			checkLockConflictsAtOnce(t, ctx, kind, b, name, "B Lock")
			if n := rdb.Exists(ctx, queueK).Val(); n != 0 {
				t.Errorf("B's failed Lock wrote %s (%s, PTTL %v)", queueK, rdb.Type(ctx, queueK).Val(), rdb.PTTL(ctx, queueK).Val())
			}
			checkForeignUntouched(t, ctx, rdb, waitersK, dump)
			checkExpiries(t, ctx, rdb, name, waitersK)

			if err := la.Unlock(ctx); err != nil {
				t.Errorf("A Unlock: %v", err)
			}
			if n := rdb.Exists(ctx, lockK).Val(); n != 0 {
				t.Errorf("A's Unlock left the lock held (PTTL %v)", rdb.PTTL(ctx, lockK).Val())
			}
			checkForeignUntouched(t, ctx, rdb, waitersK, dump)
			checkExpiries(t, ctx, rdb, name, waitersK)
		})
	}
}

// The waiters key is overwritten while a waiter is queued: the holder's
// Unlock, which must read it to hand the lock over, frees the lock anyway
// and reports the conflict; whatever the waiter then gets (the free lock,
// or the conflict), nothing of dlock's is left without an expiry.
func TestForeignWaitersKeyWhileQueued(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	for _, kind := range queuedKinds {
		t.Run(kind.name, func(t *testing.T) {
			a := newClient(t, srv)
			// A's Unlock must find B in the queue, so B must not poll
			// between the foreign value and the Unlock: a poll that meets
			// the value ends B's Lock, and a Mutex's B then leaves the
			// queue. B polls every third of its waiter lease (2s), but the
			// wait that subscribes B to the lock's channel asks again as
			// soon as the subscription is confirmed: so B waits once
			// first, and its subscription lingers for the wait under test.
			b := newClient(t, srv, dlock.WithWaiterLease(6*time.Second))
			name := t.Name()
			lockK, _, queueK, waitersK := foreignTestKeys(name)
			clearLockKeys(t, rdb, name)

			type result struct {
				l   *dlock.Lease
				err error
			}
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			// aHoldsBWaits takes the lock with A and has B wait for it.
			aHoldsBWaits := func() (*dlock.Lease, <-chan result) {
				la, err := kind.tryLock(ctx, a, name)
				if err != nil {
					t.Fatalf("A TryLock: %v", err)
				}
				done := make(chan result, 1)
				go func() {
					l, err := kind.lock(wctx, b, name)
					done <- result{l, err}
				}()
				waitFor(t, 5*time.Second, func() bool {
					return rdb.ZCard(ctx, queueK).Val() == 1 && rdb.Exists(ctx, waitersK).Val() == 1
				}, "B to queue")
				return la, done
			}
			la, done := aHoldsBWaits()
			if err := la.Unlock(ctx); err != nil {
				t.Fatalf("A Unlock, B subscribed: %v", err)
			}
			if r := <-done; r.err != nil {
				t.Fatalf("B Lock, subscribing: %v", r.err)
			} else if err := r.l.Unlock(ctx); err != nil {
				t.Fatalf("B Unlock, subscribed: %v", err)
			}

			la, done = aHoldsBWaits()
			dump := setForeign(t, ctx, rdb, waitersK, foreignQueueValues[0])

			err := la.Unlock(ctx)
			t.Logf("A Unlock: %v", err)
			if !errors.Is(err, dlock.ErrKeyConflict) {
				t.Errorf("A Unlock: got %v, want ErrKeyConflict", err)
			}
			if owner, _ := rdb.Get(ctx, lockK).Result(); owner != "" && owner == la.Owner() {
				t.Errorf("A's Unlock left A holding the lock (PTTL %v)", rdb.PTTL(ctx, lockK).Val())
			}

			r := <-done
			t.Logf("B Lock: %v", r.err)
			switch {
			case r.err == nil:
				// A Mutex's waiter that finds the lock free takes it
				// without reading the waiters key.
				if err := r.l.Unlock(ctx); err != nil && !errors.Is(err, dlock.ErrKeyConflict) {
					t.Errorf("B Unlock: %v", err)
				}
			case !errors.Is(r.err, dlock.ErrKeyConflict):
				t.Errorf("B Lock: got %v, want a lease or ErrKeyConflict", r.err)
			}
			if n := rdb.Exists(ctx, lockK).Val(); n != 0 {
				t.Errorf("the lock is still held (PTTL %v)", rdb.PTTL(ctx, lockK).Val())
			}
			checkForeignUntouched(t, ctx, rdb, waitersK, dump)
			checkExpiries(t, ctx, rdb, name, waitersK)
		})
	}
}
