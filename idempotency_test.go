package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestIdempotencyKeyRetryAfterAnErrorCountsOnce: a CountDown, TrySetCount
// or AddPermits that Redis ran but whose connection was reset before the
// reply returns an error, as go-redis sends nothing twice here. Retried by
// the caller with the same idempotency key, it takes no second effect and
// answers as the first would have; a new key is a new change. Without a
// key (the first case) the retry counts again: what the key is for.
func TestIdempotencyKeyRetryAfterAnErrorCountsOnce(t *testing.T) {
	t.Parallel()
	c, proxy := clientThroughProxy(t)
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	name := uniqueName(t)
	proxies := []*redistest.Proxy{proxy}
	l := c.Latch(name)
	count := func() string { v, _ := srv.Do(t, "GET", latchKey(name)).(string); return v }
	// lostReply runs call with its reply lost once Redis has run it (when
	// executed reports true), and requires the error the caller then gets.
	lostReply := func(what string, executed func() bool, call func() error) {
		t.Helper()
		if err := afterLostReply(t, proxies, executed, call); err == nil {
			t.Fatalf("%s with its reply lost returned nil; want the connection's error", what)
		}
	}
	countIs := func(want string) func() bool { return func() bool { return count() == want } }

	// Scripts loaded and connections dialled first, so that only the calls
	// below wait on the proxy.
	warm := c.Latch(name + "-warm")
	if _, err := warm.TrySetCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := warm.CountDown(ctx); err != nil {
		t.Fatal(err)
	}

	setCtx := dlock.WithIdempotencyKey(ctx, "set-10")
	lostReply("TrySetCount(10)", countIs("10"), func() error { _, err := l.TrySetCount(setCtx, 10); return err })
	if set, err := l.TrySetCount(setCtx, 10); err != nil || !set {
		t.Fatalf("TrySetCount(10) retried with its key = %v, %v; want true, nil (the first call set it)", set, err)
	}
	if set, err := l.TrySetCount(ctx, 10); err != nil || set {
		t.Fatalf("TrySetCount(10) without a key on a latch counting = %v, %v; want false, nil", set, err)
	}

	// The control: without a key, the retry is a change of its own.
	lostReply("CountDown without a key", countIs("9"), func() error { return l.CountDown(ctx) })
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if got := count(); got != "8" {
		t.Fatalf("count %q after a CountDown without a key and its retry, want 8 (each counts)", got)
	}

	downCtx := dlock.WithIdempotencyKey(ctx, "shard-1")
	lostReply("CountDown with a key", countIs("7"), func() error { return l.CountDown(downCtx) })
	for i := 0; i < 2; i++ {
		if err := l.CountDown(downCtx); err != nil {
			t.Fatalf("CountDown retried with its key: %v", err)
		}
	}
	if got := count(); got != "7" {
		t.Fatalf("count %q after a CountDown with a key and two retries, want 7 (counted once)", got)
	}
	// A new key is a new change, and so is the TrySetCount's key given to
	// CountDown: keys are apart per method.
	if err := l.CountDown(dlock.WithIdempotencyKey(ctx, "shard-2")); err != nil {
		t.Fatal(err)
	}
	if err := l.CountDown(setCtx); err != nil {
		t.Fatal(err)
	}
	if got := count(); got != "5" {
		t.Fatalf("count %q after CountDowns with two new keys from 7, want 5", got)
	}

	s := c.Semaphore(name, 2)
	if _, err := s.AddPermits(ctx, 0); err != nil { // loads the script
		t.Fatal(err)
	}
	addCtx := dlock.WithIdempotencyKey(ctx, "scale-up")
	lostReply("AddPermits(3)", func() bool { return semLimit(t, srv, name) == "5" }, func() error {
		_, err := s.AddPermits(addCtx, 3)
		return err
	})
	if n, err := s.AddPermits(addCtx, 3); err != nil || n != 5 {
		t.Fatalf("AddPermits(3) of 2 retried with its key = %d, %v; want 5, nil (added once)", n, err)
	}
	if n, err := s.AddPermits(dlock.WithIdempotencyKey(ctx, "scale-down"), -1); err != nil || n != 4 {
		t.Fatalf("AddPermits(-1) with a new key = %d, %v; want 4", n, err)
	}
}

// TestIdempotencyKeyBadInputSendsNothing: an empty or too long key fails
// the calls that read it with ErrInvalidArgument, naming the call, and
// changes nothing; the calls that do not read it are not affected.
func TestIdempotencyKeyBadInputSendsNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	name := uniqueName(t)
	l := c.Latch(name)
	if _, err := l.TrySetCount(ctx, 3); err != nil {
		t.Fatal(err)
	}
	s := c.Semaphore(name, 2)

	for _, key := range []string{"", strings.Repeat("k", dlock.MaxIdempotencyKeyLen+1)} {
		bad := dlock.WithIdempotencyKey(ctx, key)
		calls := map[string]func() error{
			"CountDown":   func() error { return l.CountDown(bad) },
			"TrySetCount": func() error { _, err := c.Latch(name+"-new").TrySetCount(bad, 1); return err },
			"AddPermits":  func() error { _, err := s.AddPermits(bad, 1); return err },
		}
		for op, call := range calls {
			err := call()
			if !errors.Is(err, dlock.ErrInvalidArgument) || !strings.Contains(err.Error(), op) || !strings.Contains(err.Error(), "idempotency key") {
				t.Errorf("%s with a key of %d bytes: %v; want ErrInvalidArgument naming the call and the key", op, len(key), err)
			}
		}
		if n, err := l.Count(bad); err != nil || n != 3 {
			t.Errorf("Count with a key of %d bytes = %d, %v; want 3 (it ignores the key, and nothing counted)", len(key), n, err)
		}
	}
	if v, _ := srv.Do(t, "EXISTS", latchKey(name+"-new"), semKey(name)+":limit").(int64); v != 0 {
		t.Errorf("%d keys written by calls refused for their key, want 0", v)
	}
	if n, err := s.AddPermits(dlock.WithIdempotencyKey(ctx, strings.Repeat("k", dlock.MaxIdempotencyKeyLen)), 1); err != nil || n != 3 {
		t.Errorf("AddPermits with a key of MaxIdempotencyKeyLen bytes = %d, %v; want 3", n, err)
	}
}

func TestIdempotencyKeyFrom(t *testing.T) {
	if key, ok := dlock.IdempotencyKeyFrom(context.Background()); ok || key != "" {
		t.Errorf("IdempotencyKeyFrom(Background) = %q, %v; want none", key, ok)
	}
	ctx := dlock.WithIdempotencyKey(context.Background(), "job-7")
	if key, ok := dlock.IdempotencyKeyFrom(ctx); !ok || key != "job-7" {
		t.Errorf("IdempotencyKeyFrom = %q, %v; want job-7", key, ok)
	}
}
