package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A grant from the queue to a writer leaves it the only holder, so it is
// written in the solo form (rw_grant_heads in rw_lib.lua), as the fast
// path takes a free lock. These tests hand the lock through Redis, between
// Clients (a Client's own writers pass it on with rw_transfer.lua).

// After a hand-off through the queue, the writer holds in the solo form,
// with a higher token; its TTL, Extend, renewal and Inspect read the
// string, and its Unlock hands the lock on to the next writer, solo too.
func TestRWMutexQueueGrantToWriterIsSolo(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ttl := 900 * time.Millisecond
	a, b, c := newClient(t, srv), newClient(t, srv, dlock.WithTTL(ttl)), newClient(t, srv)
	ctx := testCtx(t)
	name := t.Name()
	w1, err := a.RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second := rwGo(ctx, b.RWMutex(name).Lock)
	waitRWQueued(t, srv, name, 1)
	rwUnlock(t, w1)
	w2 := rwAwait(t, second, 20*time.Second, "the writer granted from the queue")
	wantSolo(ctx, t, srv, name, "W", w2)
	if w2.Token() <= w1.Token() {
		t.Errorf("the granted writer's token %d not above the first's %d", w2.Token(), w1.Token())
	}

	granted := time.Now()
	waitFor(t, 20*time.Second, func() bool { return time.Since(granted) > 3*ttl }, "three TTLs of renewals")
	if err := w2.Err(); err != nil {
		t.Fatalf("the granted writer lost its lease while renewed: %v", err)
	}
	wantSolo(ctx, t, srv, name, "W", w2)
	if d, err := w2.TTL(ctx); err != nil || d <= 0 || d > ttl {
		t.Errorf("the granted writer's TTL = %v, %v; want in (0, %v]", d, err, ttl)
	}
	if err := w2.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend of the granted writer: %v", err)
	}
	info := rwInfo(ctx, t, c, name)
	if len(info.Holders) != 1 || info.Holders[0].Owner != w2.Owner() || info.Holders[0].Token != w2.Token() || info.Holders[0].Mode != dlock.ModeWrite {
		t.Errorf("Inspect holders = %+v, want the granted writer with token %d", info.Holders, w2.Token())
	}

	third := rwGo(ctx, c.RWMutex(name).Lock)
	waitRWQueued(t, srv, name, 1)
	wantSolo(ctx, t, srv, name, "W", w2) // a waiter queueing leaves it solo
	rwUnlock(t, w2)
	w3 := rwAwait(t, third, 20*time.Second, "the writer granted after the solo grant")
	wantSolo(ctx, t, srv, name, "W", w3)
	if w3.Token() <= w2.Token() {
		t.Errorf("the third writer's token %d not above the second's %d", w3.Token(), w2.Token())
	}
	if err := w2.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Unlock of the granted writer: got %v, want ErrNotHeld", err)
	}
	rwUnlock(t, w3)
	if n := srv.Client(t).Exists(ctx, rwKeys(name)...).Val(); n != 0 {
		t.Errorf("%d keys left behind after every Unlock", n)
	}
}

// Fencing tokens strictly increase along a chain of hand-offs through the
// queue, each writer holding in the solo form.
func TestRWMutexQueueGrantsSoloTokensIncrease(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	name := t.Name()
	held, err := newClient(t, srv).RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		next := rwGo(ctx, newClient(t, srv).RWMutex(name).Lock)
		waitRWQueued(t, srv, name, 1)
		rwUnlock(t, held)
		l := rwAwait(t, next, 20*time.Second, "the next writer")
		wantSolo(ctx, t, srv, name, "W", l)
		if l.Token() <= held.Token() {
			t.Fatalf("hand-off %d: token %d not above the previous holder's %d", i, l.Token(), held.Token())
		}
		held = l
	}
	rwUnlock(t, held)
}

// Readers granted together from the queue share the lock, so they hold in
// the zset form; the writer queued behind them is granted solo once they
// are gone.
func TestRWMutexQueueGrantToReadersStaysZset(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	name := t.Name()
	w, err := newClient(t, srv).RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	read1 := rwGo(ctx, newClient(t, srv).RWMutex(name).RLock)
	waitRWQueued(t, srv, name, 1)
	read2 := rwGo(ctx, newClient(t, srv).RWMutex(name).RLock)
	waitRWQueued(t, srv, name, 2)
	rwUnlock(t, w)
	r1 := rwAwait(t, read1, 20*time.Second, "the first reader")
	r2 := rwAwait(t, read2, 20*time.Second, "the second reader")
	rdb := srv.Client(t)
	if typ := rdb.Type(ctx, rwKey(name)).Val(); typ != "zset" {
		t.Fatalf("holders key is a %s after two readers were granted, want a zset", typ)
	}
	if m := rdb.ZRange(ctx, rwKey(name), 0, -1).Val(); len(m) != 2 {
		t.Errorf("holders = %v, want both readers", m)
	}
	writer := rwGo(ctx, newClient(t, srv).RWMutex(name).Lock)
	waitRWQueued(t, srv, name, 1)
	rwUnlock(t, r1)
	rwUnlock(t, r2)
	w2 := rwAwait(t, writer, 20*time.Second, "the writer behind the readers")
	wantSolo(ctx, t, srv, name, "W", w2)
	if w2.Token() <= r1.Token() || w2.Token() <= r2.Token() {
		t.Errorf("the writer's token %d not above the readers' %d, %d", w2.Token(), r1.Token(), r2.Token())
	}
	rwUnlock(t, w2)
}

// A writer granted from the queue that dies (nothing renews it) frees the
// lock by its key's expiry, as a Mutex's holder does: the next writer
// gets it.
func TestRWMutexQueueGrantedSoloWriterExpires(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	name := t.Name()
	short := []dlock.Option{dlock.WithTTL(400 * time.Millisecond), dlock.WithAutoRenew(false)}
	w1, err := newClient(t, srv).RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dying := rwGo(ctx, newClient(t, srv, short...).RWMutex(name).Lock)
	waitRWQueued(t, srv, name, 1)
	rwUnlock(t, w1)
	dead := rwAwait(t, dying, 20*time.Second, "the writer that will not renew")
	wantSolo(ctx, t, srv, name, "W", dead)
	w3, err := newClient(t, srv).RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock after the granted writer died: %v", err)
	}
	if w3.Token() <= dead.Token() {
		t.Errorf("the new writer's token %d not above the dead one's %d", w3.Token(), dead.Token())
	}
	if _, err := dead.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("TTL of the expired writer: got %v, want ErrNotHeld", err)
	}
	rwUnlock(t, w3)
}
