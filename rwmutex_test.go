package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func init() {
	registerChildMode("rw-read-hold", func(ctx context.Context, c *dlock.Client, name string, ready func()) error {
		_, err := c.RWMutex(name, dlock.WithTTL(time.Second)).RLock(ctx)
		if err == nil {
			ready()
		}
		return err
	})
	registerChildMode("rw-write-hold", func(ctx context.Context, c *dlock.Client, name string, ready func()) error {
		_, err := c.RWMutex(name, dlock.WithTTL(time.Second)).Lock(ctx)
		if err == nil {
			ready()
		}
		return err
	})
	registerChildMode("rw-write-wait", func(ctx context.Context, c *dlock.Client, name string, ready func()) error {
		go func() { _, _ = c.RWMutex(name, dlock.WithWaiterLease(300*time.Millisecond)).Lock(ctx) }()
		ready() // the parent waits for the queue entry itself
		return nil
	})
}

// rwKey is the holders key of read-write lock name under the default prefix;
// its other keys add ":fence", ":q", ":w" and ":tok".
func rwKey(name string) string { return lockKey(name) + ":rw" }

// rwKeys lists every key of read-write lock name but its fencing counter,
// which outlives the lock by design.
func rwKeys(name string) []string {
	k := rwKey(name)
	return []string{k, k + ":q", k + ":w", k + ":tok"}
}

// waitRWQueued waits until n members are queued for read-write lock name.
func waitRWQueued(t testing.TB, srv *redistest.Server, name string, n int64) {
	t.Helper()
	rdb := srv.Client(t)
	waitFor(t, 10*time.Second, func() bool {
		return rdb.ZCard(context.Background(), rwKey(name)+":q").Val() == n
	}, fmt.Sprintf("%d members queued on read-write lock %q", n, name))
}

// rwResult is what a Lock or RLock run in a goroutine returns.
type rwResult struct {
	lease *dlock.Lease
	err   error
}

// rwGo runs lock in a goroutine and returns its result channel.
func rwGo(ctx context.Context, lock func(context.Context) (*dlock.Lease, error)) <-chan rwResult {
	ch := make(chan rwResult, 1)
	go func() {
		l, err := lock(ctx)
		ch <- rwResult{l, err}
	}()
	return ch
}

// rwAwait receives a result, failing the test after limit.
func rwAwait(t testing.TB, ch <-chan rwResult, limit time.Duration, what string) *dlock.Lease {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.lease
	case <-time.After(limit):
		t.Fatalf("%s: nothing after %v", what, limit)
		return nil
	}
}

func rwUnlock(t testing.TB, l *dlock.Lease) {
	t.Helper()
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

func TestRWMutexReadersShareWriterExcludes(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv, dlock.WithOwnerInfo("reader-b"))
	rdb := srv.Client(t)
	name := t.Name()
	ctx := testCtx(t)

	r1, err := a.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatalf("RLock: %v", err)
	}
	r2, err := b.RWMutex(name).TryRLock(ctx)
	if err != nil {
		t.Fatalf("TryRLock beside another reader: %v", err)
	}
	if r2.Token() <= r1.Token() {
		t.Errorf("second reader's token %d not above the first's %d", r2.Token(), r1.Token())
	}
	if _, err := b.RWMutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock while readers hold: got %v, want ErrNotObtained", err)
	}
	if ml, err := b.Mutex(name).TryLock(ctx); err != nil {
		t.Fatalf("a Mutex of the same name is another lock: %v", err)
	} else {
		rwUnlock(t, ml)
	}

	holders := rdb.ZRangeWithScores(ctx, rwKey(name), 0, -1).Val()
	if len(holders) != 2 {
		t.Fatalf("holders = %v, want two readers", holders)
	}
	for _, z := range holders {
		if m := z.Member.(string); !strings.HasPrefix(m, "R") || len(m) < 33 {
			t.Errorf("holder member %q: want \"R\" then the owner value", m)
		}
	}
	for _, k := range []string{rwKey(name), rwKey(name) + ":tok", rwKey(name) + ":fence"} {
		if d := rdb.PTTL(ctx, k).Val(); d <= 0 {
			t.Errorf("%s has no expiry (PTTL %v)", k, d)
		}
	}
	if got := rdb.HGet(ctx, rwKey(name)+":tok", holders[0].Member.(string)).Val(); got == "" {
		t.Errorf("no token recorded for %v", holders[0].Member)
	}

	rwUnlock(t, r1)
	if _, err := a.RWMutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock while one reader still holds: got %v, want ErrNotObtained", err)
	}
	rwUnlock(t, r2)
	w, err := a.RWMutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock once the readers left: %v", err)
	}
	if w.Token() <= r2.Token() {
		t.Errorf("writer's token %d not above the readers' %d", w.Token(), r2.Token())
	}
	// A lone holder of a free lock holds it in the solo form: its member
	// as the holders key's string (rw_lib.lua).
	if m := rdb.Get(ctx, rwKey(name)).Val(); !strings.HasPrefix(m, "W") || rdb.PTTL(ctx, rwKey(name)).Val() <= 0 {
		t.Errorf("holders = %q, want the writer's \"W\" member, expiring", m)
	}
	if _, err := b.RWMutex(name).TryRLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryRLock while a writer holds: got %v, want ErrNotObtained", err)
	}
	if _, err := b.RWMutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock while a writer holds: got %v, want ErrNotObtained", err)
	}
	rwUnlock(t, w)
	if n := rdb.Exists(ctx, rwKeys(name)...).Val(); n != 0 {
		t.Errorf("%d keys left behind after every Unlock", n)
	}
}

// TestRWMutexNeverTwoWritersOrAWriterWithReaders mixes readers and writers
// from several Clients with their own pools, as separate processes would,
// and checks exclusion, sharing and fencing from inside the critical
// sections.
func TestRWMutexNeverTwoWritersOrAWriterWithReaders(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	const clients, workers = 3, 4
	name := t.Name()
	ctx := testCtx(t)
	stop := time.Now().Add(1500 * time.Millisecond)

	var (
		writers, readers      atomic.Int32
		violations, maxShared atomic.Int32
		writes, reads         atomic.Int32
		maxToken, lastWriter  atomic.Int64
		wg                    sync.WaitGroup
	)
	raise := func(v *atomic.Int64, x int64) {
		for cur := v.Load(); x > cur && !v.CompareAndSwap(cur, x); cur = v.Load() {
		}
	}
	for i := 0; i < clients; i++ {
		c := newClient(t, srv, dlock.WithTTL(5*time.Second))
		for j := 0; j < workers; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rw := c.RWMutex(name)
				for time.Now().Before(stop) {
					if rand.Intn(4) == 0 {
						l, err := rw.Lock(ctx)
						if err != nil {
							t.Errorf("Lock: %v", err)
							return
						}
						if writers.Add(1) != 1 || readers.Load() != 0 {
							violations.Add(1)
						}
						if l.Token() <= maxToken.Load() {
							t.Errorf("writer's token %d not above every earlier one (%d)", l.Token(), maxToken.Load())
						}
						raise(&maxToken, l.Token())
						lastWriter.Store(l.Token())
						time.Sleep(200 * time.Microsecond)
						writes.Add(1)
						writers.Add(-1)
						if err := l.Unlock(ctx); err != nil {
							t.Errorf("writer Unlock: %v", err)
							return
						}
						continue
					}
					l, err := rw.RLock(ctx)
					if err != nil {
						t.Errorf("RLock: %v", err)
						return
					}
					n := readers.Add(1)
					if writers.Load() != 0 {
						violations.Add(1)
					}
					for cur := maxShared.Load(); n > cur && !maxShared.CompareAndSwap(cur, n); cur = maxShared.Load() {
					}
					if l.Token() <= lastWriter.Load() {
						t.Errorf("reader's token %d not above the last writer's %d", l.Token(), lastWriter.Load())
					}
					raise(&maxToken, l.Token())
					time.Sleep(time.Millisecond)
					reads.Add(1)
					readers.Add(-1)
					if err := l.Unlock(ctx); err != nil {
						t.Errorf("reader Unlock: %v", err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("%d writes, %d reads, up to %d readers at once", writes.Load(), reads.Load(), maxShared.Load())
	if n := violations.Load(); n != 0 {
		t.Errorf("%d times two writers, or a writer and readers, held the lock together", n)
	}
	if writes.Load() == 0 || reads.Load() == 0 {
		t.Errorf("want both modes exercised: %d writes, %d reads", writes.Load(), reads.Load())
	}
	if maxShared.Load() < 2 {
		t.Errorf("readers never overlapped: this is not a shared lock")
	}
	if n := srv.Client(t).Exists(ctx, rwKeys(name)...).Val(); n != 0 {
		t.Errorf("%d keys left behind", n)
	}
}

func TestRWMutexWriterPreference(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	a, b, c := newClient(t, srv), newClient(t, srv), newClient(t, srv)
	name := t.Name()
	ctx := testCtx(t)

	r1, err := a.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writer := rwGo(ctx, b.RWMutex(name).Lock)
	waitRWQueued(t, srv, name, 1)

	// A writer waits: a new reader may not join the one holding.
	// The error says why: no writer holds it, but one is waiting.
	if _, err := c.RWMutex(name).TryRLock(ctx); !errors.Is(err, dlock.ErrNotObtained) || !strings.Contains(err.Error(), "a writer waiting for it goes first") {
		t.Fatalf("TryRLock with a writer queued: got %v, want ErrNotObtained saying a writer waits", err)
	}
	reader := rwGo(ctx, c.RWMutex(name).RLock)
	waitRWQueued(t, srv, name, 2)

	rwUnlock(t, r1)
	w := rwAwait(t, writer, 10*time.Second, "queued writer")
	select {
	case r := <-reader:
		t.Fatalf("the reader queued behind the writer got in with it: %v", r.err)
	default:
	}
	if n := srv.Client(t).ZCard(ctx, rwKey(name)+":q").Val(); n != 1 {
		t.Errorf("queue length %d while the writer holds, want the reader still queued", n)
	}
	rwUnlock(t, w)
	r2 := rwAwait(t, reader, 10*time.Second, "reader queued behind the writer")
	if r2.Token() <= w.Token() {
		t.Errorf("reader's token %d not above the writer's %d", r2.Token(), w.Token())
	}
	rwUnlock(t, r2)
}

func TestRWMutexWriterIsNotStarvedByReaders(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	clients := []*dlock.Client{newClient(t, srv), newClient(t, srv)}

	// A relay of readers: each next reader takes the lock before the
	// previous one lets go, so the lock is never free of readers, and a
	// writer that waited for such a moment would wait for ever. A next
	// reader that cannot get in within 100ms (a writer waits ahead of it)
	// does not hold the relay up: the previous one lets go anyway.
	var (
		writerIn, reads atomic.Int32
		done            = make(chan struct{})
		relayEnded      = make(chan struct{})
	)
	go func() {
		defer close(relayEnded)
		var prev *dlock.Lease
		defer func() {
			if prev != nil {
				_ = prev.Unlock(ctx)
			}
		}()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			next := rwGo(ctx, clients[i%2].RWMutex(name).RLock)
			var r rwResult
			select {
			case r = <-next:
			case <-time.After(100 * time.Millisecond):
				if prev != nil {
					_ = prev.Unlock(ctx)
					prev = nil
				}
				r = <-next
			}
			if r.err != nil {
				t.Errorf("RLock: %v", r.err)
				return
			}
			if writerIn.Load() != 0 {
				t.Errorf("a reader got in while the writer held the lock")
			}
			reads.Add(1)
			if prev != nil {
				_ = prev.Unlock(ctx)
			}
			prev = r.lease
			time.Sleep(5 * time.Millisecond) // the reader's work
		}
	}()
	defer func() {
		close(done)
		<-relayEnded
	}()
	waitFor(t, 10*time.Second, func() bool { return reads.Load() >= 10 }, "the relay of readers to get going")

	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	start := time.Now()
	w, err := newClient(t, srv).RWMutex(name).Lock(wctx)
	if err != nil {
		t.Fatalf("writer starved by a relay of readers: %v", err)
	}
	waited := time.Since(start)
	writerIn.Store(1)
	readsBefore := reads.Load()
	time.Sleep(30 * time.Millisecond) // the writer's work: readers stay out
	writerIn.Store(0)
	rwUnlock(t, w)
	// The writer waits for the reader holding when it arrived, not for a
	// moment without readers (which never comes).
	if waited > 2*time.Second {
		t.Errorf("the writer waited %v behind a relay of readers", waited)
	}
	waitFor(t, 10*time.Second, func() bool { return reads.Load() > readsBefore }, "readers to resume after the writer")
}
