package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestSemaphoreKilledHolderReturnsPermitsWithinTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	holder := startChild(t, srv.Addr(), "sem-hold", name) // both permits, TTL 1s, auto-renewed
	c := newClient(t, srv)
	ctx := testCtx(t)
	s := c.Semaphore(name, 2)
	if _, err := s.TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("the child's permits are not held: %v", err)
	}
	killed := time.Now()
	holder.kill()
	p := mustAcquire(t, s, 2)
	defer p.Release(ctx)
	if d := time.Since(killed); d > 1500*time.Millisecond+time.Second {
		t.Errorf("got the killed holder's permits after %v; want within its 1s TTL plus a poll", d)
	}
}

func TestSemaphoreKilledWaiterLeavesTheQueue(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	c := newClient(t, srv, dlock.WithWaiterLease(300*time.Millisecond))
	s := c.Semaphore(name, 2)
	p := mustAcquire(t, s, 1)
	waiter := startChild(t, srv.Addr(), "sem-wait", name) // wants 2, waiter lease 300ms
	waitSemQueued(t, srv, name, 1)
	waiter.kill()

	got := acquireAsync(ctx, s, 2)
	waitSemQueued(t, srv, name, 2)
	start := time.Now()
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.p.Release(ctx)
	// The dead waiter's lease (300ms) and at most one claim window (300ms).
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the live waiter waited %v behind a killed one", d)
	}
}

func TestSemaphoreLossSignalledWhenHolderRemoved(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(600*time.Millisecond))
	name := t.Name()
	ctx := context.Background()
	p := mustAcquire(t, c.Semaphore(name, 2), 1)
	keep := mustAcquire(t, c.Semaphore(name, 2), 1)
	rdb := srv.Client(t)
	holders := rdb.ZRange(ctx, semKey(name), 0, -1).Val()
	if len(holders) != 2 {
		t.Fatalf("holders %v", holders)
	}
	// Find p's entry by its token and remove it, as an operator would.
	for _, h := range holders {
		if strings.HasSuffix(rdb.HGet(ctx, semKey(name)+":n", h).Val(), fmt.Sprintf(" %d", p.Token())) {
			rdb.ZRem(ctx, semKey(name), h)
		}
	}
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("loss not signalled")
	}
	if err := p.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Err() = %v, want ErrLockLost", err)
	}
	if err := p.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release of lost permits: got %v, want ErrNotHeld", err)
	}
	if err := p.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend of lost permits: got %v, want ErrNotHeld", err)
	}
	if err := keep.Err(); err != nil {
		t.Errorf("the other holder was affected: %v", err)
	}
	if err := keep.Release(ctx); err != nil {
		t.Errorf("Release of the other holder: %v", err)
	}
}

func TestSemaphoreKeyConflict(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	for _, key := range []string{"", ":n", ":limit", ":fence", ":q"} {
		name := t.Name() + key
		rdb.Del(ctx, semKey(name)+key) // from an earlier -count run
		rdb.RPush(ctx, semKey(name)+key, "a", "b")
		s := c.Semaphore(name, 2)
		start := time.Now()
		for what, try := range map[string]func() error{
			"TryAcquire": func() error { _, err := s.TryAcquire(ctx, 1); return err },
			"Acquire":    func() error { _, err := s.Acquire(ctx, 1); return err },
			"SetPermits": func() error { return s.SetPermits(ctx, 3) },
			"AddPermits": func() error { _, err := s.AddPermits(ctx, 1); return err },
		} {
			if err := try(); !errors.Is(err, dlock.ErrKeyConflict) {
				t.Errorf("%s with a list at %s: got %v, want ErrKeyConflict", what, key, err)
			}
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("took %v to report the conflicts", d)
		}
		if n := rdb.LLen(ctx, semKey(name)+key).Val(); n != 2 {
			t.Errorf("the list at %s was modified", key)
		}
		if n := rdb.Exists(ctx, semKey(name), semKey(name)+":q").Val(); key != "" && key != ":q" && n != 0 {
			t.Errorf("keys written despite the conflict at %s", key)
		}
	}
	// A foreign string where the limit goes, and one without an expiry.
	name := t.Name() + "-str"
	rdb.Set(ctx, semKey(name)+":limit", "many", time.Minute)
	if _, err := c.Semaphore(name, 2).Available(ctx); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Errorf("Available with a non-numeric limit: got %v, want ErrKeyConflict", err)
	}
	rdb.Set(ctx, semKey(name)+":limit", "4", 0)
	if _, err := c.Semaphore(name, 2).TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Errorf("TryAcquire with a limit without expiry: got %v, want ErrKeyConflict", err)
	}
}

// TestSemaphoreWaitOnAStalledServerReportsTheWholeWait: an Acquire whose
// first attempt used up its deadline on a server that stopped answering
// says how long it waited, from its start, not from after that attempt.
func TestSemaphoreWaitOnAStalledServerReportsTheWholeWait(t *testing.T) {
	c, proxy := clientThroughProxy(t)
	s := c.Semaphore(t.Name(), 2)
	p, err := s.Acquire(testCtx(t), 1) // connections dialled, scripts loaded
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Release(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	proxy.HoldReplies(true)
	defer proxy.HoldReplies(false)
	ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
	defer cancel()
	_, err = s.Acquire(ctx, 1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire on a stalled server: got %v, want the deadline", err)
	}
	if strings.Contains(err.Error(), "waiting 0s") {
		t.Errorf("Acquire on a stalled server says %q; want the wait counted from its start", err)
	}
}

// TestSemaphoreReleaseNOfLostPermits: ReleaseN of permits that are gone
// returns Release's ErrNotHeld, and the permits are then lost.
func TestSemaphoreReleaseNOfLostPermits(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	rdb := srv.Client(t)

	// Removed by hand, found by ReleaseN itself (nothing renews them).
	c := newClient(t, srv, dlock.WithAutoRenew(false))
	name := uniqueName(t)
	p := mustAcquire(t, c.Semaphore(name, 3), 2)
	keep := mustAcquire(t, c.Semaphore(name, 3), 1)
	defer keep.Release(ctx)
	for _, h := range rdb.ZRange(ctx, semKey(name), 0, -1).Val() {
		if strings.HasSuffix(rdb.HGet(ctx, semKey(name)+":n", h).Val(), fmt.Sprintf(" %d", p.Token())) {
			rdb.ZRem(ctx, semKey(name), h)
		}
	}
	if err := p.ReleaseN(ctx, 1); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("ReleaseN of removed permits: got %v, want ErrNotHeld", err)
	}
	select {
	case <-p.Done():
	default:
		t.Error("Done not closed when ReleaseN found the permits gone")
	}
	if err := p.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Err() = %v, want ErrLockLost", err)
	}
	if p.N() != 2 {
		t.Errorf("N() = %d after a failed ReleaseN(1) of 2", p.N())
	}
	if err := p.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release of lost permits: got %v, want ErrNotHeld", err)
	}
	if err := keep.Err(); err != nil {
		t.Errorf("the other holder was affected: %v", err)
	}

	// Expired: lost here at their deadline, so ReleaseN sends nothing.
	name = uniqueName(t)
	crdb, counter := countingClient(t, srv)
	c2, err := dlock.New(crdb, dlock.WithAutoRenew(false), dlock.WithTTL(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	q, err := c2.Semaphore(name, 3).Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	<-q.Done()
	before := counter.n.Load()
	if err := q.ReleaseN(ctx, 1); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("ReleaseN of expired permits: got %v, want ErrNotHeld", err)
	}
	if sent := counter.n.Load() - before; sent != 0 {
		t.Errorf("ReleaseN of permits lost here sent %d commands", sent)
	}
	// The local deadline comes a little before the server's expiry, when
	// Release would still find them.
	waitFor(t, 5*time.Second, func() bool { return rdb.Exists(ctx, semKey(name)).Val() == 0 }, "the permits to expire on the server")
	if err := q.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release of expired permits: got %v, want ErrNotHeld", err)
	}
}

// TestSemaphoreReleaseNKeyConflict: a foreign key fails ReleaseN with
// ErrKeyConflict and changes nothing: the permits are still held, all of
// them.
func TestSemaphoreReleaseNKeyConflict(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	name := uniqueName(t)
	s := c.Semaphore(name, 3)
	p := mustAcquire(t, s, 3)
	rdb.RPush(ctx, semKey(name)+":q", "a", "b")
	if err := p.ReleaseN(ctx, 1); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Errorf("ReleaseN with a list at :q: got %v, want ErrKeyConflict", err)
	}
	if _, err := s.AddPermits(ctx, 1); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Errorf("AddPermits with a list at :q: got %v, want ErrKeyConflict", err)
	}
	if p.N() != 3 || p.Err() != nil {
		t.Errorf("N() = %d, Err() = %v after a conflict; want 3, nil", p.N(), p.Err())
	}
	rdb.Del(ctx, semKey(name)+":q")
	rdb.Set(ctx, semKey(name)+":calls", "x", time.Minute)
	if _, err := s.AddPermits(ctx, 1); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Errorf("AddPermits with a string at :calls: got %v, want ErrKeyConflict", err)
	}
	if v := semLimit(t, srv, name); v != "" {
		t.Errorf("a limit (%s) was stored despite the conflict", v)
	}
	if err := p.ReleaseN(ctx, 1); err != nil || p.N() != 2 {
		t.Errorf("ReleaseN once the conflict is gone: %v, N() %d", err, p.N())
	}
	_ = p.Release(ctx)
}

// TestSemaphoreReleaseOfExpiredPermitsIsNotHeld: permits past their expiry
// on the server clock, which no acquire has dropped yet, are not held any
// more: their Release reports ErrNotHeld, even with another holder keeping
// the semaphore's keys alive and nobody waiting (the release's fast path).
func TestSemaphoreReleaseOfExpiredPermitsIsNotHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	name := t.Name()
	short := mustAcquire(t, c.Semaphore(name, 2, dlock.WithTTL(200*time.Millisecond), dlock.WithAutoRenew(false)), 1)
	long := mustAcquire(t, c.Semaphore(name, 2), 1)
	defer func() { _ = long.Release(ctx) }()
	rdb := srv.Client(t)
	waitFor(t, 10*time.Second, func() bool {
		first := rdb.ZRangeWithScores(ctx, semKey(name), 0, 0).Val()
		now, err := rdb.Time(ctx).Result()
		return err == nil && rdb.ZCard(ctx, semKey(name)).Val() == 2 && len(first) == 1 && first[0].Score < float64(now.UnixMilli())
	}, "the short holder's expiry past on the server clock")
	if err := short.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release of expired permits: %v; want ErrNotHeld", err)
	}
	if n := rdb.ZCard(ctx, semKey(name)).Val(); n != 1 {
		t.Errorf("%d holders left; want the live one", n)
	}
}
