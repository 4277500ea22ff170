package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A ReentrantMutex's last Unlock frees the lock, and ends the lease, even
// when its queue key holds something dlock did not write: the release
// reports the conflict but deletes the lock, as a Mutex's does.
func TestForeignQueueKeyReentrantUnlockFreesLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := dlock.WithOwner(testCtx(t), "job")
	name := uniqueName(t)
	lockK := lockKey(name) + ":re"
	queueK := lockK + ":q"
	t.Cleanup(func() { rdb.Del(context.Background(), lockK, lockK+":fence", queueK, lockK+":w") })

	l, err := newClient(t, srv).ReentrantMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dump := setForeign(t, ctx, rdb, queueK, foreignQueueValues[0])
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Errorf("Unlock: got %v, want ErrKeyConflict", err)
	}
	if n := rdb.Exists(ctx, lockK).Val(); n != 0 {
		t.Errorf("the last Unlock left the lock held (PTTL %v) although it released it", rdb.PTTL(ctx, lockK).Val())
	}
	select {
	case <-l.Done():
	default:
		t.Errorf("lease after an Unlock that released the lock: Done still open (Err %v)", l.Err())
	}
	checkForeignUntouched(t, ctx, rdb, queueK, dump)
}

// An RWMutex holder's Unlock frees its hold, and ends the lease, even when
// the queue key holds something dlock did not write, and says so.
func TestForeignQueueKeyRWMutexUnlockFreesLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	name := uniqueName(t)
	holdersK := lockKey(name) + ":rw"
	queueK := holdersK + ":q"
	t.Cleanup(func() {
		rdb.Del(context.Background(), holdersK, holdersK+":fence", queueK, holdersK+":w", holdersK+":tok")
	})

	l, err := newClient(t, srv).RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dump := setForeign(t, ctx, rdb, queueK, foreignQueueValues[0])
	err = l.Unlock(ctx)
	if !errors.Is(err, dlock.ErrKeyConflict) || !strings.Contains(err.Error(), "the lock was released") {
		t.Errorf("Unlock: got %v, want ErrKeyConflict saying the lock was released", err)
	}
	if n := rdb.ZCard(ctx, holdersK).Val(); n != 0 {
		t.Errorf("the Unlock left %d holders although it released the lock", n)
	}
	select {
	case <-l.Done():
	default:
		t.Errorf("lease after an Unlock that released the lock: Done still open (Err %v)", l.Err())
	}
	checkForeignUntouched(t, ctx, rdb, queueK, dump)
}

// A queue key deleted by hand while two wait comes back with an expiry at
// the next refresh, for every kind that queues. HSET or ZADD re-creates it
// without one, while the other queue key keeps the long expiry a waiter with
// a longer lease gave it, so a check of that key alone would leave the
// re-created one without an expiry until the long lease's next refresh.
func TestQueueKeyDeletedByHandGetsAnExpiryBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	for _, kind := range queueKinds {
		for _, deleted := range []string{":w", ":q"} {
			t.Run(kind.name+"/"+deleted, func(t *testing.T) { testQueueKeyGetsExpiryBack(t, srv, kind, deleted) })
		}
	}
}

// queueKind is a kind that queues its waiters: base is the key its :q and
// :w hang from; take locks name (or acquires a permit of one) and returns
// its release.
type queueKind struct {
	name string
	base func(name string) string
	take func(ctx context.Context, c *dlock.Client, name string) (func() error, error)
}

var queueKinds = []queueKind{
	{"Mutex", lockKey, func(ctx context.Context, c *dlock.Client, name string) (func() error, error) {
		return leaseRelease(c.Mutex(name).Lock(ctx))
	}},
	{"FairMutex", lockKey, func(ctx context.Context, c *dlock.Client, name string) (func() error, error) {
		return leaseRelease(c.FairMutex(name).Lock(ctx))
	}},
	{"ReentrantMutex", reentrantKey, func(ctx context.Context, c *dlock.Client, name string) (func() error, error) {
		return leaseRelease(c.ReentrantMutex(name).Lock(dlock.WithOwner(ctx, dlock.NewOwnerID())))
	}},
	{"RWMutex", rwKey, func(ctx context.Context, c *dlock.Client, name string) (func() error, error) {
		return leaseRelease(c.RWMutex(name).Lock(ctx))
	}},
	{"Semaphore", semKey, func(ctx context.Context, c *dlock.Client, name string) (func() error, error) {
		p, err := c.Semaphore(name, 1).Acquire(ctx, 1)
		if err != nil {
			return nil, err
		}
		return func() error { return p.Release(context.Background()) }, nil
	}},
}

// leaseRelease returns l's Unlock, or err.
func leaseRelease(l *dlock.Lease, err error) (func() error, error) {
	if err != nil {
		return nil, err
	}
	return func() error { return l.Unlock(context.Background()) }, nil
}

// testQueueKeyGetsExpiryBack deletes kind's queue key deleted (":q" or
// ":w") while two wait for a held lock, and checks that a refresh
// re-creates it with an expiry.
func testQueueKeyGetsExpiryBack(t *testing.T, srv *redistest.Server, kind queueKind, deleted string) {
	rdb := srv.Client(t)
	ctx := testCtx(t)
	a := newClient(t, srv)
	// The first waiter's place lives 30s, refreshed every 10s; the
	// second's 600ms, refreshed every 200ms.
	long := newClient(t, srv, dlock.WithWaiterLease(30*time.Second))
	short := newClient(t, srv, dlock.WithWaiterLease(600*time.Millisecond))
	name := uniqueName(t) // a waiter that leaves after its :q entry was deleted may leave its :w entry until its lease ends
	base := kind.base(name)
	key := base + deleted
	release, err := kind.take(ctx, a, name)
	if err != nil {
		t.Fatalf("A takes it: %v", err)
	}
	t.Cleanup(func() { _ = release() })

	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 2)
	wait := func(c *dlock.Client) {
		release, err := kind.take(wctx, c, name)
		if err == nil {
			_ = release()
			err = errors.New("a waiter got it while A held it")
		}
		done <- err
	}
	defer func() {
		cancel()
		for i := 0; i < 2; i++ {
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("a wait: got %v, want context.Canceled", err)
			}
		}
	}()
	go wait(long)
	waitFor(t, 5*time.Second, func() bool {
		return rdb.PTTL(ctx, base+":w").Val() > 10*time.Second
	}, "the long lease queued")
	go wait(short)
	waitFor(t, 5*time.Second, func() bool {
		return rdb.HLen(ctx, base+":w").Val() == 2
	}, "the short lease queued")
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() bool {
		return rdb.Exists(ctx, key).Val() == 1
	}, "a refresh to re-create "+key)
	if pttl := rdb.PTTL(ctx, key).Val(); pttl <= 0 {
		t.Errorf("%s came back without an expiry (PTTL %v)", key, pttl)
	}
}
