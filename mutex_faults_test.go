package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestDeadWaiterDoesNotStallTheQueue(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	opts := []dlock.Option{dlock.WithWaiterLease(300 * time.Millisecond)}
	a := newClient(t, srv, opts...)
	lease := mustLock(t, a, name)

	// A waiter that dies while queued: its client stops without cleaning
	// up, which is what a crashed process looks like to Redis.
	dead := newClient(t, srv, opts...)
	deadCtx, killDead := context.WithCancel(ctx)
	go func() { _, _ = dead.Mutex(name).Lock(deadCtx) }()
	waitQueued(t, srv, name, 1)
	freezeWaiter(t, srv, name)
	killDead()

	live := newClient(t, srv, opts...)
	got := lockThenUnlock(ctx, live.Mutex(name))
	waitQueued(t, srv, name, 2)
	start := time.Now()
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("live waiter: %v", err)
	}
	// The dead waiter's lease and then its claim window (each 300ms) run
	// out; then the live waiter gets the lock.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the live waiter waited %v behind a dead one", d)
	}
}

// freezeWaiter copies the first waiter's queue entry under a new owner that
// nobody polls, and removes the original, leaving a "dead" waiter at the
// head of the queue whose lease runs out without being refreshed.
func freezeWaiter(t testing.TB, srv *redistest.Server, name string) {
	t.Helper()
	ctx := context.Background()
	rdb := srv.Client(t)
	q, w := lockKey(name)+":q", lockKey(name)+":w"
	members := rdb.ZRangeWithScores(ctx, q, 0, 0).Val()
	if len(members) != 1 {
		t.Fatalf("no waiter to freeze")
	}
	owner := members[0].Member.(string)
	entry := rdb.HGet(ctx, w, owner).Val()
	ghost := "ffffffffffffffffffffffffffffffff;ghost"
	pipe := rdb.TxPipeline()
	pipe.ZRem(ctx, q, owner)
	pipe.HDel(ctx, w, owner)
	pipe.ZAdd(ctx, q, redis.Z{Score: members[0].Score, Member: ghost})
	pipe.HSet(ctx, w, ghost, entry)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("freezing the waiter: %v", err)
	}
}

func TestWrongTypeKeyConflicts(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	name := t.Name()
	rdb.Del(ctx, lockKey(name)) // left by an earlier run (-count)
	rdb.RPush(ctx, lockKey(name), "a", "b")

	if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Errorf("TryLock on a list: got %v, want ErrKeyConflict", err)
	}
	start := time.Now()
	if _, err := c.Mutex(name).Lock(ctx); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Errorf("Lock on a list: got %v, want ErrKeyConflict", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Lock took %v to report the conflict; want at once", d)
	}
	if n := rdb.LLen(ctx, lockKey(name)).Val(); n != 2 {
		t.Errorf("the list was modified: length %d", n)
	}
	if d := rdb.PTTL(ctx, lockKey(name)).Val(); d != -1 {
		t.Errorf("the list got an expiry: %v", d)
	}
}

func TestForeignStringWithoutTTLConflicts(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	name := t.Name()
	// The ReentrantMutex of name keeps its lock under a key of its own.
	foreign := []string{lockKey(name), lockKey(name) + ":re"}
	for _, key := range foreign {
		rdb.Set(ctx, key, "someone-else", 0)
	}

	start := time.Now()
	for _, try := range []func() error{
		func() error { _, err := c.Mutex(name).TryLock(ctx); return err },
		func() error { _, err := c.Mutex(name).Lock(ctx); return err },
		func() error { return c.Do(ctx, name, func(context.Context) error { return nil }) },
		func() error { _, err := c.FairMutex(name).TryLock(ctx); return err },
		func() error { _, err := c.ReentrantMutex(name).TryLock(dlock.WithOwner(ctx, "me")); return err },
		func() error { _, err := c.ReentrantMutex(name).Lock(dlock.WithOwner(ctx, "me")); return err },
		func() error { _, err := c.MultiLock(name+"/other", name).TryLock(ctx); return err },
	} {
		err := try()
		if !errors.Is(err, dlock.ErrKeyConflict) {
			t.Errorf("got %v, want ErrKeyConflict", err)
		} else if !strings.Contains(err.Error(), "no expiry") {
			t.Errorf("got %v, want the conflict to say the value has no expiry", err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v to report the conflicts; want at once", d)
	}
	for _, key := range foreign {
		if v := rdb.Get(ctx, key).Val(); v != "someone-else" {
			t.Errorf("the foreign value under %s was changed to %q", key, v)
		}
		if n := rdb.Exists(ctx, key+":q").Val(); n != 0 {
			t.Errorf("a waiter was queued behind the foreign key %s", key)
		}
	}
}

func TestScriptFlushIsTransparent(t *testing.T) {
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(2*time.Second))
	name := t.Name()
	ctx := testCtx(t)
	for i := 0; i < 3; i++ {
		srv.FlushScripts(t)
		lease, err := c.Mutex(name).TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock after SCRIPT FLUSH: %v", err)
		}
		srv.FlushScripts(t)
		if err := lease.Extend(ctx, 3*time.Second); err != nil {
			t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
		}
		srv.FlushScripts(t)
		if _, err := lease.TTL(ctx); err != nil {
			t.Fatalf("TTL after SCRIPT FLUSH: %v", err)
		}
		srv.FlushScripts(t)
		if err := lease.Unlock(ctx); err != nil {
			t.Fatalf("Unlock after SCRIPT FLUSH: %v", err)
		}
	}
}

func TestLostSubscriptionCostsLatencyNotAHang(t *testing.T) {
	srv := redistest.Start(t)
	a := newClient(t, srv)
	b := newClient(t, srv, dlock.WithWaiterLease(600*time.Millisecond))
	name := t.Name()
	ctx := testCtx(t)
	lease := mustLock(t, a, name)
	got := lockThenUnlock(ctx, b.Mutex(name))
	waitQueued(t, srv, name, 1)
	// Cut every pub/sub connection and release at once: the grant's message
	// may be lost, the waiter must still get the lock.
	srv.Do(t, "CLIENT", "KILL", "TYPE", "pubsub")
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter hung after its subscription was cut")
	}
}

func TestKilledHolderProcessFreesTheLockWithinItsTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	holder := startChild(t, srv.Addr(), "mutex-hold", name) // TTL 1s, auto-renewed
	c := newClient(t, srv)
	ctx := testCtx(t)
	if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("the child's lock is not held: %v", err)
	}
	killed := time.Now()
	holder.kill()
	lease := mustLock(t, c, name)
	defer lease.Unlock(ctx)
	if d := time.Since(killed); d > 1500*time.Millisecond+time.Second {
		t.Errorf("got the killed holder's lock after %v; want within its 1s TTL plus a poll", d)
	}
}

func TestKilledWaiterProcessLeavesTheQueue(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	c := newClient(t, srv, dlock.WithWaiterLease(300*time.Millisecond))
	lease := mustLock(t, c, name)
	waiter := startChild(t, srv.Addr(), "mutex-wait", name) // waiter lease 300ms
	waitQueued(t, srv, name, 1)
	waiter.kill()

	got := lockThenUnlock(ctx, c.Mutex(name))
	waitQueued(t, srv, name, 2)
	start := time.Now()
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// The dead waiter's lease (300ms) and at most one claim window (300ms).
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the live waiter waited %v behind a killed one", d)
	}
}

func TestForeignFenceKeyConflictsWithoutTakingTheLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	name := t.Name()
	rdb.Set(ctx, lockKey(name)+":fence", "not-a-number", time.Minute)
	if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Fatalf("TryLock: got %v, want ErrKeyConflict", err)
	}
	if n := rdb.Exists(ctx, lockKey(name)).Val(); n != 0 {
		t.Error("the lock key was written before the conflict was found")
	}
	if v := rdb.Get(ctx, lockKey(name)+":fence").Val(); v != "not-a-number" {
		t.Errorf("the foreign fence key was changed to %q", v)
	}
}

// A Lock whose deadline comes before Redis answers any of its attempts
// never saw the lock held: its error says so, next to ErrNotObtained and
// the deadline, instead of reading like contention ("dlock run" printed
// "is held" and exited 75 for a free lock on a slow server).
func TestLockUnansweredSaysRedisDidNotAnswer(t *testing.T) {
	c, proxy := clientThroughProxy(t)
	ctx := testCtx(t)
	name := uniqueName(t)
	warm := mustLock(t, c, name+"warm") // dials, loads the scripts
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.HoldReplies(true)
	defer proxy.HoldReplies(false)
	for _, lock := range []func(context.Context) (*dlock.Lease, error){c.Mutex(name).Lock, c.FairMutex(name).Lock} {
		lctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err := lock(lctx)
		cancel()
		if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) ||
			!strings.Contains(fmt.Sprint(err), "no reply from Redis before the wait ended") {
			t.Errorf("Lock with every reply held back: %v; want ErrNotObtained, the deadline, and that Redis did not answer", err)
		}
	}
}
