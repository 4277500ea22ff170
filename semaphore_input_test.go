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

func TestSemaphoreBadInputSendsNothing(t *testing.T) {
	srv := redistest.Shared(t)
	rdb, counter := countingClient(t, srv)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t)
	good := c.Semaphore("fine", 3)
	tooMany := dlock.MaxPermits
	tooMany++ // a variable: MaxPermits+1 overflows int on 32-bit platforms
	cases := map[string]func() error{
		"n zero":         func() error { _, err := good.TryAcquire(ctx, 0); return err },
		"n negative":     func() error { _, err := good.Acquire(ctx, -1); return err },
		"n too large":    func() error { _, err := good.Acquire(ctx, tooMany); return err },
		"permits zero":   func() error { _, err := c.Semaphore("x", 0).TryAcquire(ctx, 1); return err },
		"permits < 0":    func() error { _, err := c.Semaphore("x", -3).Acquire(ctx, 1); return err },
		"empty name":     func() error { _, err := c.Semaphore("", 1).Acquire(ctx, 1); return err },
		"brace":          func() error { _, err := c.Semaphore("}ab", 1).TryAcquire(ctx, 1); return err },
		"bad option":     func() error { _, err := c.Semaphore("x", 1, dlock.WithTTL(0)).Acquire(ctx, 1); return err },
		"nil option":     func() error { _, err := c.Semaphore("x", 1, nil).Acquire(ctx, 1); return err },
		"set zero":       func() error { return good.SetPermits(ctx, 0) },
		"set too large":  func() error { return good.SetPermits(ctx, tooMany) },
		"bad available":  func() error { _, err := c.Semaphore("", 1).Available(ctx); return err },
		"bad setpermits": func() error { return c.Semaphore("x", 0).SetPermits(ctx, 2) },
		"add too many":   func() error { _, err := good.AddPermits(ctx, dlock.MaxPermits); return err },
		"add too few":    func() error { _, err := good.AddPermits(ctx, -dlock.MaxPermits); return err },
		"bad addpermits": func() error { _, err := c.Semaphore("", 1).AddPermits(ctx, 1); return err },
	}
	for what, try := range cases {
		if err := try(); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", what, err)
		}
	}
	if n := counter.n.Load(); n != 0 {
		t.Errorf("rejected input sent %d commands to Redis", n)
	}
}

func TestSemaphoreMoreThanTheLimitFailsAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	name := t.Name()
	s := c.Semaphore(name, 3)
	start := time.Now()
	if _, err := s.TryAcquire(ctx, 4); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("TryAcquire(4) of 3: got %v, want ErrInvalidArgument", err)
	}
	_, err := s.Acquire(ctx, 4)
	if !errors.Is(err, dlock.ErrInvalidArgument) || errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("Acquire(4) of 3: got %v, want ErrInvalidArgument", err)
	} else if !strings.Contains(err.Error(), "limit is 3") {
		t.Errorf("the error does not say what the limit is: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v to refuse", d)
	}
	if n := srv.Client(t).Exists(ctx, semKey(name)+":q").Val(); n != 0 {
		t.Error("the impossible request was queued")
	}
}

// TestSemaphoreTryAcquireBehindTheQueueSaysWhy: permits free, but a waiter
// queued first for more than are free: TryAcquire is refused (arrival
// order), and its error says that this, not a lack of permits, is why.
func TestSemaphoreTryAcquireBehindTheQueueSaysWhy(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	name := t.Name()
	ctx := testCtx(t)
	s := c.Semaphore(name, 3)
	held, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiter := make(chan error, 1)
	go func() {
		p, err := s.Acquire(waitCtx, 2) // one free: queued
		if err == nil {
			_ = p.Release(ctx)
		}
		waiter <- err
	}()
	waitSemQueued(t, srv, name, 1)
	_, err = s.TryAcquire(ctx, 1)
	if !errors.Is(err, dlock.ErrNotObtained) || !strings.Contains(err.Error(), "arrival order") {
		t.Errorf("TryAcquire of a free permit behind a queued waiter: got %v, want ErrNotObtained saying others came first", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waiter; err != nil {
		t.Errorf("queued Acquire: %v", err)
	}
	if _, err := s.TryAcquire(ctx, 4); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("TryAcquire of more than the limit: got %v", err)
	}
}
