package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestMinHoldOutlastsAnEarlyUnlock: an Unlock before the minimum hold
// returns at once and leaves the key to expire at the hold's end; nobody
// gets the lock before.
func TestMinHoldOutlastsAnEarlyUnlock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := testCtx(t)
	name := t.Name()
	const minHold = time.Second
	c := newClient(t, srv, dlock.WithMinHold(minHold))
	before := time.Now()
	l, err := c.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan time.Time, 1)
	go func() {
		w, err := newClient(t, srv).Mutex(name).Lock(ctx)
		if err != nil {
			t.Errorf("Lock: %v", err)
			waited <- time.Time{}
			return
		}
		waited <- time.Now()
		_ = w.Unlock(ctx)
	}()
	waitQueued(t, srv, name, 1)
	unlocking := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if took := time.Since(unlocking); took > minHold/2 {
		t.Errorf("Unlock took %v; want it to return at once", took)
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Err after Unlock: %v; want ErrNotHeld", err)
	}
	if pttl := srv.Client(t).PTTL(ctx, lockKey(name)).Val(); pttl <= 0 || pttl > minHold {
		t.Errorf("the key's PTTL after an early Unlock: %v; want the rest of the minimum hold", pttl)
	}
	if _, err := newClient(t, srv).Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("TryLock within the minimum hold: %v; want ErrNotObtained", err)
	}
	got := <-waited
	if got.IsZero() {
		return
	}
	if d := got.Sub(before); d < minHold {
		t.Errorf("the waiter got the lock %v after the grant; want at least the minimum hold, %v", d, minHold)
	}
}

// TestMinHoldOverReleasesAtOnce: an Unlock after the minimum hold releases.
func TestMinHoldOverReleasesAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := testCtx(t)
	c := newClient(t, srv)
	l, err := c.Mutex(t.Name(), dlock.WithMinHold(50*time.Millisecond)).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // past the minimum hold: the point of the test
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := srv.Client(t).Exists(ctx, lockKey(t.Name())).Val(); n != 0 {
		t.Error("an Unlock after the minimum hold left the key")
	}
}

// TestMinHoldRunsOnceAcrossSkewedSchedulers: three hosts whose cron fired
// 200 ms apart run a fast job under TryLock; with a minimum hold one of
// them runs it, without one every host does.
func TestMinHoldRunsOnceAcrossSkewedSchedulers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := testCtx(t)
	hosts := []*dlock.Client{newClient(t, srv), newClient(t, srv), newClient(t, srv)}
	runs := func(name string, opts ...dlock.Option) int {
		n := 0
		for i, c := range hosts {
			if i > 0 {
				time.Sleep(200 * time.Millisecond) // the hosts' skew: what the test is about
			}
			// The cron job: run if the lock is free, skip it otherwise.
			l, err := c.Mutex(name, opts...).TryLock(ctx)
			switch {
			case errors.Is(err, dlock.ErrNotObtained):
				continue
			case err != nil:
				t.Fatalf("TryLock: %v", err)
			}
			n++ // the job, done at once
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
		}
		return n
	}
	if n := runs(t.Name() + "-plain"); n != 3 {
		t.Errorf("without a minimum hold the job ran %d times; want 3 (each host found the lock free)", n)
	}
	if n := runs(t.Name()+"-held", dlock.WithMinHold(5*time.Second)); n != 1 {
		t.Errorf("with a minimum hold the job ran %d times; want once", n)
	}
}

// TestMinHoldOtherKinds: a Semaphore's permits and an RWMutex's write lock
// stay taken after an early release; a ReentrantMutex refuses the option.
func TestMinHoldOtherKinds(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := testCtx(t)
	c := newClient(t, srv, dlock.WithMinHold(5*time.Second))
	other := newClient(t, srv)
	name := t.Name()

	p, err := c.Semaphore(name, 1).TryAcquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Semaphore(name, 1).TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("a permit within the minimum hold: %v; want ErrNotObtained", err)
	}

	w, err := c.RWMutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.RWMutex(name).TryRLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("a read lock within the write lock's minimum hold: %v; want ErrNotObtained", err)
	}

	if _, err := c.ReentrantMutex(name).TryLock(dlock.WithOwner(ctx, "me")); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("a ReentrantMutex with WithMinHold: %v; want ErrInvalidArgument", err)
	}
	if _, err := other.Mutex(name, dlock.WithMinHold(time.Nanosecond)).TryLock(ctx); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("WithMinHold(1ns): %v; want ErrInvalidArgument", err)
	}
}
