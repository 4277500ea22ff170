package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

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
	barged := tryLockAllAlong(ctx, newClient(t, srv).RWMutex(name))

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
	checkDowngradeRefuses(ctx, t, a, name, r, w)

	if n := barged(); n != 0 {
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

// tryLockAllAlong calls rw.TryLock, and unlocks what it got, until the
// returned stop is called; stop returns how many times it got the lock.
func tryLockAllAlong(ctx context.Context, rw *dlock.RWMutex) (stop func() int32) {
	var got atomic.Int32
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			default:
			}
			if l, err := rw.TryLock(ctx); err == nil {
				got.Add(1)
				_ = l.Unlock(ctx)
			}
		}
	}()
	return func() int32 {
		close(done)
		<-stopped
		return got.Load()
	}
}

// checkDowngradeRefuses checks that Downgrade refuses, as invalid, a read
// lease (r), nil, a Mutex's lease, and the write lease w of name on another
// lock.
func checkDowngradeRefuses(ctx context.Context, t *testing.T, a *dlock.Client, name string, r, w *dlock.Lease) {
	t.Helper()
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
}

func TestRWMutexDowngradeKeepsTheHoldLimit(t *testing.T) {
	t.Parallel()
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

func TestRWMutexFencingTokensIncreaseAcrossModes(t *testing.T) {
	t.Parallel()
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

func TestRWMutexReadLeaseExtendAndExpiry(t *testing.T) {
	t.Parallel()
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
