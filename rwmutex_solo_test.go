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

// A lone holder of a free RWMutex holds it in the solo form: its member,
// the mode byte and its owner value, as the holders key's string, expiring
// with the hold (rw_lib.lua). These tests take the lock through every
// transition out of that form.

// soloHolder returns the member a solo holder of read-write lock name
// keeps in its holders key, "" when the key is not a string with an
// expiry.
func soloHolder(ctx context.Context, t testing.TB, srv *redistest.Server, name string) string {
	t.Helper()
	rdb := srv.Client(t)
	v, err := rdb.Get(ctx, rwKey(name)).Result()
	if err != nil || rdb.PTTL(ctx, rwKey(name)).Val() <= 0 {
		return ""
	}
	return v
}

// wantSolo fails unless l holds read-write lock name alone, in the solo
// form, in mode ("W" or "R").
func wantSolo(ctx context.Context, t testing.TB, srv *redistest.Server, name, mode string, l *dlock.Lease) {
	t.Helper()
	if got := soloHolder(ctx, t, srv, name); !strings.HasPrefix(got, mode+l.Owner()) {
		t.Fatalf("holders key = %q, want the solo form of %s%s...", got, mode, l.Owner())
	}
}

func TestRWMutexSoloWriterHandsToWaitingReader(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv)
	ctx := testCtx(t)
	name := t.Name()
	w, err := a.RWMutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantSolo(ctx, t, srv, name, "W", w)
	if _, err := b.RWMutex(name).TryRLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryRLock beside a solo writer: got %v, want ErrNotObtained", err)
	}
	read := rwGo(ctx, b.RWMutex(name).RLock)
	waitRWQueued(t, srv, name, 1)
	rwUnlock(t, w)
	r := rwAwait(t, read, 10*time.Second, "the reader waiting for the solo writer")
	if r.Token() <= w.Token() {
		t.Errorf("reader's token %d not above the solo writer's %d", r.Token(), w.Token())
	}
	if d, err := r.TTL(ctx); err != nil || d <= 0 {
		t.Errorf("the reader's TTL = %v, %v; want it held", d, err)
	}
	rwUnlock(t, r)
	if n := srv.Client(t).Exists(ctx, rwKeys(name)...).Val(); n != 0 {
		t.Errorf("%d keys left behind after every Unlock", n)
	}
}

// Waiters that come and go while a writer holds alone cannot be granted
// anything: the writer stays in the solo form, whose release costs what a
// Mutex's does, and hands the lock to the waiter still queued.
func TestRWMutexSoloWriterStaysSoloWhileWaitersComeAndGo(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	a, b, c := newClient(t, srv), newClient(t, srv), newClient(t, srv)
	ctx := testCtx(t)
	name := t.Name()
	w, err := a.RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leaveCtx, leave := context.WithCancel(ctx)
	left := rwGo(leaveCtx, b.RWMutex(name).RLock)
	waitRWQueued(t, srv, name, 1)
	wantSolo(ctx, t, srv, name, "W", w)
	leave()
	if r := <-left; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the reader that gave up: %v, %v; want context.Canceled", r.lease, r.err)
	}
	waitRWQueued(t, srv, name, 0)
	wantSolo(ctx, t, srv, name, "W", w)
	next := rwGo(ctx, c.RWMutex(name).Lock)
	waitRWQueued(t, srv, name, 1)
	wantSolo(ctx, t, srv, name, "W", w)
	rwUnlock(t, w)
	n := rwAwait(t, next, 10*time.Second, "the writer queued behind the solo writer")
	if n.Token() <= w.Token() {
		t.Errorf("the next writer's token %d not above the solo writer's %d", n.Token(), w.Token())
	}
	rwUnlock(t, n)
}

func TestRWMutexSoloReaderJoinedBySecondReader(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv)
	ctx := testCtx(t)
	name := t.Name()
	r1, err := a.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantSolo(ctx, t, srv, name, "R", r1)
	r2, err := b.RWMutex(name).TryRLock(ctx)
	if err != nil {
		t.Fatalf("TryRLock beside a solo reader: %v", err)
	}
	if r2.Token() <= r1.Token() {
		t.Errorf("second reader's token %d not above the first's %d", r2.Token(), r1.Token())
	}
	rdb := srv.Client(t)
	if m := rdb.ZRange(ctx, rwKey(name), 0, -1).Val(); len(m) != 2 {
		t.Errorf("holders = %v, want both readers", m)
	}
	for _, l := range []*dlock.Lease{r1, r2} {
		if d, err := l.TTL(ctx); err != nil || d <= 0 {
			t.Errorf("TTL of a reader = %v, %v; want it held", d, err)
		}
	}
	if _, err := a.RWMutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock beside two readers: got %v, want ErrNotObtained", err)
	}
	rwUnlock(t, r1)
	rwUnlock(t, r2)
	if n := rdb.Exists(ctx, rwKeys(name)...).Val(); n != 0 {
		t.Errorf("%d keys left behind after both Unlocks", n)
	}
	if err := r1.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Unlock of the first reader: got %v, want ErrNotHeld", err)
	}
}

// The watchdog renews a solo holder in place, and its TTL and Extend read
// and set the key's own expiry.
func TestRWMutexSoloHolderRenewed(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ttl := 600 * time.Millisecond
	c := newClient(t, srv, dlock.WithTTL(ttl))
	ctx := testCtx(t)
	name := t.Name()
	for _, mode := range []string{"W", "R"} {
		rw := c.RWMutex(name + mode)
		take := rw.Lock
		if mode == "R" {
			take = rw.RLock
		}
		start := time.Now()
		l, err := take(ctx)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, func() bool { return time.Since(start) > 3*ttl }, "three TTLs of renewals")
		if err := l.Err(); err != nil {
			t.Fatalf("%s: the renewed solo holder lost its lease: %v", mode, err)
		}
		wantSolo(ctx, t, srv, name+mode, mode, l)
		if d, err := l.TTL(ctx); err != nil || d <= 0 || d > ttl {
			t.Errorf("%s: TTL = %v, %v; want in (0, %v]", mode, d, err, ttl)
		}
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatalf("%s: Extend: %v", mode, err)
		}
		if d, err := l.TTL(ctx); err != nil || d < 50*time.Second {
			t.Errorf("%s: TTL after Extend = %v, %v; want about a minute", mode, d, err)
		}
		wantSolo(ctx, t, srv, name+mode, mode, l)
		rwUnlock(t, l)
		if n := srv.Client(t).Exists(ctx, rwKeys(name+mode)...).Val(); n != 0 {
			t.Errorf("%s: %d keys left behind after Unlock", mode, n)
		}
	}
}

func TestRWMutexSoloWriterDowngraded(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv)
	ctx := testCtx(t)
	name := t.Name()
	rw := a.RWMutex(name)
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantSolo(ctx, t, srv, name, "W", w)
	r, err := rw.Downgrade(ctx, w)
	if err != nil {
		t.Fatalf("Downgrade of a solo writer: %v", err)
	}
	if r.Token() <= w.Token() {
		t.Errorf("read lease token %d not above the write lease's %d", r.Token(), w.Token())
	}
	if d, err := r.TTL(ctx); err != nil || d <= 0 {
		t.Errorf("the read lease's TTL = %v, %v; want it held", d, err)
	}
	if err := w.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock of the downgraded write lease: got %v, want ErrNotHeld", err)
	}
	r2, err := b.RWMutex(name).TryRLock(ctx)
	if err != nil {
		t.Fatalf("TryRLock beside the downgraded reader: %v", err)
	}
	if _, err := b.RWMutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock beside two readers: got %v, want ErrNotObtained", err)
	}
	rwUnlock(t, r)
	rwUnlock(t, r2)
	if n := srv.Client(t).Exists(ctx, rwKeys(name)...).Val(); n != 0 {
		t.Errorf("%d keys left behind after every Unlock", n)
	}
}

// A solo writer's Unlock hands the lock to a writer of its own Client
// waiting in the local line (rw_transfer.lua), which holds it solo too.
func TestRWMutexSoloWriterTransferredLocally(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	dlock.SetStandbyGrace(c, time.Minute)
	ctx := testCtx(t)
	name := t.Name()
	rw := c.RWMutex(name)
	w1, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantSolo(ctx, t, srv, name, "W", w1)
	next := rwGo(ctx, rw.Lock)
	waitFor(t, 10*time.Second, func() bool { return dlock.LineWaiters(c, rwHolders(name)) == 1 }, "the second writer to line up")
	rwUnlock(t, w1)
	w2 := rwAwait(t, next, 10*time.Second, "the writer handed the lock")
	if w2.Token() <= w1.Token() {
		t.Errorf("next writer's token %d not above the first's %d", w2.Token(), w1.Token())
	}
	if got := soloHolder(ctx, t, srv, name); strings.HasPrefix(got, "W"+w1.Owner()) {
		t.Errorf("holders key = %q: still the first writer", got)
	}
	if d, err := w2.TTL(ctx); err != nil || d <= 0 {
		t.Errorf("the next writer's TTL = %v, %v; want it held", d, err)
	}
	if err := w1.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Unlock of the first writer: got %v, want ErrNotHeld", err)
	}
	rwUnlock(t, w2)
	if n := srv.Client(t).Exists(ctx, rwKeys(name)...).Val(); n != 0 {
		t.Errorf("%d keys left behind after every Unlock", n)
	}
}

// A solo holder that dies (nothing renews it) frees the lock by itself.
func TestRWMutexSoloHolderExpires(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	short := []dlock.Option{dlock.WithTTL(300 * time.Millisecond), dlock.WithAutoRenew(false)}
	a, b := newClient(t, srv, short...), newClient(t, srv)
	ctx := testCtx(t)
	for _, mode := range []string{"W", "R"} {
		name := t.Name() + mode
		rw := a.RWMutex(name)
		take := rw.TryLock
		if mode == "R" {
			take = rw.TryRLock
		}
		dead, err := take(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantSolo(ctx, t, srv, name, mode, dead)
		w, err := b.RWMutex(name).Lock(ctx)
		if err != nil {
			t.Fatalf("%s: Lock after the solo holder died: %v", mode, err)
		}
		if w.Token() <= dead.Token() {
			t.Errorf("%s: new writer's token %d not above the dead holder's %d", mode, w.Token(), dead.Token())
		}
		if err := dead.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("%s: Extend of the expired solo holder: got %v, want ErrNotHeld", mode, err)
		}
		if _, err := dead.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("%s: TTL of the expired solo holder: got %v, want ErrNotHeld", mode, err)
		}
		if err := dead.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) && !errors.Is(err, dlock.ErrLockLost) {
			t.Errorf("%s: Unlock of the expired solo holder: got %v, want ErrNotHeld or ErrLockLost", mode, err)
		}
		rwUnlock(t, w)
	}
}
