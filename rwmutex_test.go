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

	"github.com/redis/go-redis/v9"

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

func TestRWMutexDowngrade(t *testing.T) {
	srv := redistest.Shared(t)
	a := newClient(t, srv)
	name := t.Name()
	ctx := testCtx(t)
	rdb := srv.Client(t)

	w, err := a.RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var readers []<-chan rwResult
	for i := 0; i < 2; i++ {
		readers = append(readers, rwGo(ctx, newClient(t, srv).RWMutex(name).RLock))
		waitRWQueued(t, srv, name, int64(i+1))
	}
	writer2 := rwGo(ctx, newClient(t, srv).RWMutex(name).Lock)
	waitRWQueued(t, srv, name, 3)
	localReader := rwGo(ctx, a.RWMutex(name).RLock) // behind writer2
	waitRWQueued(t, srv, name, 4)

	// Another writer tries all along: it must never get in.
	var barged atomic.Int32
	stop := make(chan struct{})
	hammered := make(chan struct{})
	e := newClient(t, srv)
	go func() {
		defer close(hammered)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if l, err := e.RWMutex(name).TryLock(ctx); err == nil {
				barged.Add(1)
				_ = l.Unlock(ctx)
			}
		}
	}()

	r, err := a.RWMutex(name).Downgrade(ctx, w)
	if err != nil {
		t.Fatalf("Downgrade: %v", err)
	}
	select {
	case <-w.Done():
	default:
		t.Error("the write lease's Done is open after Downgrade")
	}
	if err := w.Err(); !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("write lease Err = %v, want ErrNotHeld and not ErrLockLost", err)
	}
	if r.Token() <= w.Token() {
		t.Errorf("read lease token %d not above the write lease's %d", r.Token(), w.Token())
	}
	// The readers queued at the head are granted at once, the writer behind
	// them keeps waiting, and the reader behind the writer too.
	var granted []*dlock.Lease
	for i, ch := range readers {
		l := rwAwait(t, ch, 5*time.Second, fmt.Sprintf("queued reader %d", i))
		if l.Token() <= r.Token() {
			t.Errorf("queued reader's token %d not above the downgraded lease's %d", l.Token(), r.Token())
		}
		granted = append(granted, l)
	}
	if m := rdb.ZRange(ctx, rwKey(name), 0, -1).Val(); len(m) != 3 {
		t.Errorf("holders after Downgrade: %v, want three readers", m)
	}
	if n := rdb.ZCard(ctx, rwKey(name)+":q").Val(); n != 2 {
		t.Errorf("queue length %d, want the writer and the reader behind it", n)
	}

	if err := w.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) || !strings.Contains(err.Error(), "downgraded") {
		t.Errorf("Unlock of the downgraded write lease: got %v, want ErrNotHeld, saying it was downgraded", err)
	}
	if _, err := a.RWMutex(name).Downgrade(ctx, w); !errors.Is(err, dlock.ErrNotHeld) || strings.Contains(err.Error(), "lost") {
		t.Errorf("second Downgrade: got %v, want ErrNotHeld, not calling the lease lost", err)
	}
	if _, err := a.RWMutex(name).Downgrade(ctx, r); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Downgrade of a read lease: got %v, want ErrInvalidArgument", err)
	}
	if _, err := a.RWMutex(name).Downgrade(ctx, nil); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Downgrade(nil): got %v, want ErrInvalidArgument", err)
	}
	ml := mustLock(t, a, name)
	if _, err := a.RWMutex(name).Downgrade(ctx, ml); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Downgrade of a Mutex lease: got %v, want ErrInvalidArgument", err)
	}
	rwUnlock(t, ml)
	if _, err := a.RWMutex("other").Downgrade(ctx, w); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Downgrade on another lock: got %v, want ErrInvalidArgument", err)
	}

	close(stop)
	<-hammered
	if n := barged.Load(); n != 0 {
		t.Errorf("another writer got in %d times around the downgrade", n)
	}
	select {
	case res := <-writer2:
		t.Fatalf("the queued writer got in beside readers: %v", res.err)
	default:
	}

	// Once every reader is gone, writer2 gets in, then the reader behind it.
	for _, l := range append(granted, r) {
		rwUnlock(t, l)
	}
	rwUnlock(t, rwAwait(t, writer2, 10*time.Second, "writer queued behind the readers"))
	rwUnlock(t, rwAwait(t, localReader, 10*time.Second, "reader queued behind the writer"))
}

func TestRWMutexDowngradeKeepsTheHoldLimit(t *testing.T) {
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(5*time.Second), dlock.WithMaxHold(time.Second))
	ctx := testCtx(t)
	rw := c.RWMutex(t.Name())
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := rw.Downgrade(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Unlock(ctx)
	if d, err := r.TTL(ctx); err != nil || d > time.Second {
		t.Errorf("read lease TTL = %v, %v; want at most the 1s left of the write lease's hold", d, err)
	}
	waitDone(t, r, 5*time.Second)
	if !errors.Is(r.Err(), dlock.ErrLockLost) {
		t.Errorf("Err = %v, want ErrLockLost at the hold limit", r.Err())
	}
}

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

func TestRWMutexFencingTokensIncreaseAcrossModes(t *testing.T) {
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	rdb := srv.Client(t)
	name := t.Name()
	ctx := testCtx(t)
	rw := c.RWMutex(name)
	var last int64
	check := func(l *dlock.Lease, what string) {
		t.Helper()
		if l.Token() <= last {
			t.Fatalf("%s token %d not above %d", what, l.Token(), last)
		}
		last = l.Token()
	}
	for i := 0; i < 10; i++ {
		if i == 5 {
			rdb.Del(ctx, rwKey(name)+":fence") // as if it had expired
		}
		w, err := rw.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		check(w, "writer")
		rwUnlock(t, w)
		r1, err := rw.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		check(r1, "reader")
		r2, err := rw.TryRLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		check(r2, "second reader")
		rwUnlock(t, r1)
		rwUnlock(t, r2)
	}

	// Readers granted together, that learn of it by polling rather than by
	// the grant's message, still get each their own token.
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	spin := newClient(t, srv, dlock.WithWaitStrategy(dlock.SpinWait(time.Millisecond, 10*time.Millisecond)))
	r1 := rwGo(ctx, spin.RWMutex(name).RLock)
	waitRWQueued(t, srv, name, 1)
	r2 := rwGo(ctx, spin.RWMutex(name).RLock)
	waitRWQueued(t, srv, name, 2)
	rwUnlock(t, w)
	l1 := rwAwait(t, r1, 10*time.Second, "first spinning reader")
	l2 := rwAwait(t, r2, 10*time.Second, "second spinning reader")
	defer rwUnlock(t, l1)
	defer rwUnlock(t, l2)
	if l1.Token() <= w.Token() || l2.Token() <= l1.Token() {
		t.Errorf("tokens writer %d, readers %d and %d: want increasing in grant order", w.Token(), l1.Token(), l2.Token())
	}
}

func TestRWMutexKeyConflict(t *testing.T) {
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

func TestRWMutexReadLeaseExtendAndExpiry(t *testing.T) {
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew(false))
	rw := c.RWMutex(t.Name())
	ctx := testCtx(t)
	r1, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Unlock(ctx)
	if err := r1.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if d, err := r1.TTL(ctx); err != nil || d < 9*time.Second {
		t.Errorf("TTL after Extend = %v, %v; want about 10s", d, err)
	}
	// r2 is not renewed: its share expires by itself and Extend can't
	// bring it back.
	waitDone(t, r2, 5*time.Second)
	if err := r2.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend of an expired read lease: got %v, want ErrNotHeld", err)
	}
	if n := srv.Client(t).ZCard(ctx, rwKey(t.Name())).Val(); n < 1 || n > 2 {
		t.Errorf("holders: %d", n)
	}
	if _, err := rw.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("TryLock beside the extended reader: got %v, want ErrNotObtained", err)
	}
	rwUnlock(t, r1)
	// The expired share may outlive r2's local deadline by the drift
	// allowance: Lock waits for it.
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock after the readers: %v", err)
	}
	rwUnlock(t, w)
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
	waitUntil(t, 10*time.Second, "the short hold's expiry past on the server clock", func() bool {
		first := rdb.ZRangeWithScores(ctx, rwKey(name), 0, 0).Val()
		now, err := rdb.Time(ctx).Result()
		return err == nil && rdb.ZCard(ctx, rwKey(name)).Val() == 2 && len(first) == 1 && first[0].Score < float64(now.UnixMilli())
	})
	if err := short.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock of an expired read hold: %v; want ErrNotHeld", err)
	}
	if n := rdb.ZCard(ctx, rwKey(name)).Val(); n != 1 {
		t.Errorf("%d holders left; want the live one", n)
	}
}
