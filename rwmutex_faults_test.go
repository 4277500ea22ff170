package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestRWMutexKilledReaderFreesItsShareWithinItsTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	reader := startChild(t, srv.Addr(), "rw-read-hold", name) // TTL 1s, auto-renewed
	c := newClient(t, srv)
	ctx := testCtx(t)
	own, err := c.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RWMutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("the child's read lease is not held: %v", err)
	}
	writer := rwGo(ctx, c.RWMutex(name).Lock)
	waitRWQueued(t, srv, name, 1)
	rwUnlock(t, own) // the live reader leaves; the killed one's share must expire
	killed := time.Now()
	reader.kill()
	w := rwAwait(t, writer, 10*time.Second, "writer behind a killed reader")
	defer rwUnlock(t, w)
	if d := time.Since(killed); d > 1500*time.Millisecond+time.Second {
		t.Errorf("the writer got in %v after the reader was killed; want within its 1s TTL plus a poll", d)
	}
}

func TestRWMutexKilledWriterFreesTheLockWithinItsTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	writer := startChild(t, srv.Addr(), "rw-write-hold", name) // TTL 1s, auto-renewed
	c := newClient(t, srv)
	ctx := testCtx(t)
	if _, err := c.RWMutex(name).TryRLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("the child's write lease is not held: %v", err)
	}
	killed := time.Now()
	writer.kill()
	r, err := c.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rwUnlock(t, r)
	if d := time.Since(killed); d > 1500*time.Millisecond+time.Second {
		t.Errorf("got a read lease %v after the writer was killed; want within its 1s TTL plus a poll", d)
	}
}

func TestRWMutexKilledWaiterLeavesTheQueue(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	c := newClient(t, srv, dlock.WithWaiterLease(300*time.Millisecond))
	r1, err := c.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rwUnlock(t, r1)
	waiter := startChild(t, srv.Addr(), "rw-write-wait", name) // waiter lease 300ms
	waitRWQueued(t, srv, name, 1)
	// The error says why: no writer holds it, but one is waiting.
	if _, err := c.RWMutex(name).TryRLock(ctx); !errors.Is(err, dlock.ErrNotObtained) || !strings.Contains(err.Error(), "a writer waiting for it goes first") {
		t.Fatalf("TryRLock with a writer queued: got %v, want ErrNotObtained saying a writer waits", err)
	}
	killed := time.Now()
	waiter.kill()
	// A new reader queues behind the dead writer until its lease runs out.
	r2, err := c.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rwUnlock(t, r2)
	if d := time.Since(killed); d > 3*time.Second {
		t.Errorf("the reader waited %v behind a killed writer; want its 300ms waiter lease plus a poll", d)
	}
	if n := srv.Client(t).Exists(ctx, rwKey(name)+":q", rwKey(name)+":w").Val(); n != 0 {
		t.Errorf("the killed waiter is still queued")
	}
}

func TestRWMutexKeyConflict(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	list, zset := t.Name()+"-list", t.Name()+"-zset"
	rdb.Del(ctx, rwKey(list), rwKey(zset))
	t.Cleanup(func() { rdb.Del(context.Background(), rwKey(list), rwKey(zset)) })
	rdb.RPush(ctx, rwKey(list), "a", "b")
	rdb.ZAdd(ctx, rwKey(zset), redis.Z{Score: 1, Member: "x"})

	start := time.Now()
	for _, name := range []string{list, zset} {
		rw := c.RWMutex(name)
		for op, try := range map[string]func(context.Context) (*dlock.Lease, error){
			"TryLock": rw.TryLock, "Lock": rw.Lock, "TryRLock": rw.TryRLock, "RLock": rw.RLock,
		} {
			if _, err := try(ctx); !errors.Is(err, dlock.ErrKeyConflict) {
				t.Errorf("%s on %s: got %v, want ErrKeyConflict", op, name, err)
			}
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v to report the conflicts; want at once", d)
	}
	if n, d := rdb.LLen(ctx, rwKey(list)).Val(), rdb.PTTL(ctx, rwKey(list)).Val(); n != 2 || d != -1 {
		t.Errorf("the list was modified: length %d, PTTL %v", n, d)
	}
	if n, d := rdb.ZCard(ctx, rwKey(zset)).Val(), rdb.PTTL(ctx, rwKey(zset)).Val(); n != 1 || d != -1 {
		t.Errorf("the foreign sorted set was modified: %d members, PTTL %v", n, d)
	}
	if n := rdb.Exists(ctx, rwKey(list)+":q", rwKey(zset)+":q").Val(); n != 0 {
		t.Errorf("a waiter was queued behind a foreign key")
	}
}

func TestRWMutexScriptFlushIsTransparent(t *testing.T) {
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(2*time.Second))
	rw := c.RWMutex(t.Name())
	ctx := testCtx(t)
	for i := 0; i < 2; i++ {
		srv.FlushScripts(t)
		w, err := rw.TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock after SCRIPT FLUSH: %v", err)
		}
		srv.FlushScripts(t)
		if err := w.Extend(ctx, 3*time.Second); err != nil {
			t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
		}
		srv.FlushScripts(t)
		if _, err := w.TTL(ctx); err != nil {
			t.Fatalf("TTL after SCRIPT FLUSH: %v", err)
		}
		srv.FlushScripts(t)
		r, err := rw.Downgrade(ctx, w)
		if err != nil {
			t.Fatalf("Downgrade after SCRIPT FLUSH: %v", err)
		}
		srv.FlushScripts(t)
		if err := r.Unlock(ctx); err != nil {
			t.Fatalf("Unlock after SCRIPT FLUSH: %v", err)
		}
	}
}

func TestRWMutexCancelledWaitersLeaveNothingQueued(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv)
	name := t.Name()
	rdb := srv.Client(t)
	bg := context.Background()
	w, err := a.RWMutex(name).Lock(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	reader := rwGo(ctx, b.RWMutex(name).RLock)
	waitRWQueued(t, srv, name, 1)
	writer := rwGo(ctx, b.RWMutex(name).Lock)
	waitRWQueued(t, srv, name, 2)
	cancel()
	for _, ch := range []<-chan rwResult{reader, writer} {
		if r := <-ch; !errors.Is(r.err, dlock.ErrNotObtained) || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled wait: got %v, want ErrNotObtained and context.Canceled", r.err)
		}
	}
	waitFor(t, 5*time.Second, func() bool {
		return rdb.Exists(bg, rwKey(name)+":q", rwKey(name)+":w").Val() == 0
	}, "the cancelled waiters to leave the queue")
	rwUnlock(t, w)
	if n := rdb.Exists(bg, rwKeys(name)...).Val(); n != 0 {
		t.Errorf("%d keys left: the lock was handed to a cancelled waiter", n)
	}
}

func TestRWMutexInvalidArguments(t *testing.T) {
	srv := redistest.Shared(t)
	rdb, counter := countingClient(t, srv)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t)
	before := counter.n.Load()
	for _, rw := range []*dlock.RWMutex{
		c.RWMutex(""),
		c.RWMutex("}a"),
		c.RWMutex("ok", nil),
		c.RWMutex("ok", dlock.WithTTL(-time.Second)),
	} {
		for op, try := range map[string]func(context.Context) (*dlock.Lease, error){
			"TryLock": rw.TryLock, "Lock": rw.Lock, "TryRLock": rw.TryRLock, "RLock": rw.RLock,
		} {
			if _, err := try(ctx); !errors.Is(err, dlock.ErrInvalidArgument) {
				t.Errorf("%s on RWMutex(%q): got %v, want ErrInvalidArgument", op, rw.Name(), err)
			}
		}
	}
	if n := counter.n.Load() - before; n != 0 {
		t.Errorf("%d commands sent for rejected input", n)
	}
}

// TestRWMutexReleaseOfExpiredReadLockIsNotHeld: a read hold past its expiry
// on the server clock, which no acquire has dropped yet, is not held any
// more: its Unlock reports ErrNotHeld, even with another reader keeping the
// lock's keys alive and nobody waiting (the release's fast path).
func TestRWMutexReleaseOfExpiredReadLockIsNotHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	name := t.Name()
	short, err := c.RWMutex(name, dlock.WithTTL(200*time.Millisecond), dlock.WithAutoRenew(false)).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	long, err := c.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = long.Unlock(ctx) }()
	rdb := srv.Client(t)
	waitFor(t, 10*time.Second, func() bool {
		first := rdb.ZRangeWithScores(ctx, rwKey(name), 0, 0).Val()
		now, err := rdb.Time(ctx).Result()
		return err == nil && rdb.ZCard(ctx, rwKey(name)).Val() == 2 && len(first) == 1 && first[0].Score < float64(now.UnixMilli())
	}, "the short hold's expiry past on the server clock")
	if err := short.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock of an expired read hold: %v; want ErrNotHeld", err)
	}
	if n := rdb.ZCard(ctx, rwKey(name)).Val(); n != 1 {
		t.Errorf("%d holders left; want the live one", n)
	}
}
