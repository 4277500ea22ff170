package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// semLimit returns the limit stored for semaphore name, "" when none is.
func semLimit(t testing.TB, srv *redistest.Server, name string) string {
	t.Helper()
	return srv.Client(t).Get(context.Background(), semKey(name)+":limit").Val()
}

// patientSem is a semaphore descriptor whose waiters poll only every 10 s,
// so a waiter served within a few seconds was woken by the change that
// served it, not by its poll.
func patientSem(t testing.TB, srv *redistest.Server, name string, permits int) *dlock.Semaphore {
	return newClient(t, srv, dlock.WithWaiterLease(30*time.Second)).Semaphore(name, permits)
}

// awaitServed waits for a queued Acquire's outcome and fails the test unless
// it got its permits within promptly.
func awaitServed(t *testing.T, got <-chan acquired, what string) *dlock.Permits {
	t.Helper()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		t.Cleanup(func() { _ = r.p.Release(context.Background()) })
		return r.p
	case <-time.After(promptly):
		t.Fatalf("%s: not served within %v", what, promptly)
		return nil
	}
}

// ReleaseN of no permit, of less than none, or of more than are held is
// refused as invalid, and sends nothing.
func TestSemaphoreReleaseNRefusesBadCounts(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, counter := countingClient(t, srv)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t)
	p := mustAcquire(t, c.Semaphore(uniqueName(t), 5), 4)
	before := counter.n.Load()
	for _, n := range []int{0, -1, 5} {
		if err := p.ReleaseN(ctx, n); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("ReleaseN(%d) of 4: got %v, want ErrInvalidArgument", n, err)
		}
	}
	if sent := counter.n.Load() - before; sent != 0 {
		t.Errorf("rejected ReleaseN sent %d commands", sent)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// ReleaseN gives back part of an acquisition's permits: the rest stay
// under the same lease (token, owner, renewal), as Inspect and List show;
// ReleaseN of every permit left is Release.
func TestSemaphoreReleaseN(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	name := uniqueName(t)
	s := c.Semaphore(name, 5)
	p := mustAcquire(t, s, 4)
	token, owner, done := p.Token(), p.Owner(), p.Done()

	// Part given back: the rest stay under the same lease.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := p.ReleaseN(cancelled, 1); err != nil { // detached, as Release
		t.Fatalf("ReleaseN(1) of 4 with a cancelled ctx: %v", err)
	}
	if err := p.ReleaseN(ctx, 2); err != nil {
		t.Fatalf("ReleaseN(2) of 3: %v", err)
	}
	if p.N() != 1 || p.Token() != token || p.Owner() != owner || p.Done() != done || p.Err() != nil {
		t.Errorf("after ReleaseN: N() %d, token %d (was %d), owner %q (was %q), Err %v; want 1 permit under the same lease",
			p.N(), p.Token(), token, p.Owner(), owner, p.Err())
	}
	if got, want := srv.Client(t).HGet(ctx, semKey(name)+":n", srv.Client(t).ZRange(ctx, semKey(name), 0, 0).Val()[0]).Val(), fmt.Sprintf("1 %d", token); got != want {
		t.Errorf("count entry %q, want %q", got, want)
	}
	if n, err := s.Available(ctx); err != nil || n != 4 {
		t.Errorf("Available() = %d, %v; want 4", n, err)
	}
	// Operators see what is left.
	list, err := c.List(ctx, name)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for what, infos := range map[string][]dlock.LockInfo{"Inspect": mustInspect(t, c, name), "List": list} {
		info := infoOf(t, infos, dlock.KindSemaphore)
		if len(info.Holders) != 1 || info.Holders[0].Permits != 1 || info.Holders[0].Token != token || info.Holders[0].Owner != owner {
			t.Errorf("%s holders %+v, want the owner with 1 permit and token %d", what, info.Holders, token)
		}
	}
	if err := p.Extend(ctx, time.Minute); err != nil {
		t.Errorf("Extend after ReleaseN: %v", err)
	}
	if d, err := p.TTL(ctx); err != nil || d < 50*time.Second {
		t.Errorf("TTL() after ReleaseN and Extend = %v, %v", d, err)
	}

	// ReleaseN(N()) is Release.
	if err := p.ReleaseN(ctx, 1); err != nil {
		t.Fatalf("ReleaseN(1) of 1: %v", err)
	}
	select {
	case <-done:
	default:
		t.Error("Done not closed by ReleaseN of every permit")
	}
	if err := p.Err(); !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Err() after ReleaseN of every permit = %v, want ErrNotHeld only", err)
	}
	if n := srv.Client(t).Exists(ctx, semKey(name), semKey(name)+":n").Val(); n != 0 {
		t.Errorf("holder keys left after every permit was released")
	}
	if err := p.ReleaseN(ctx, 1); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("ReleaseN after the end: got %v, want ErrNotHeld", err)
	}
	if err := p.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after ReleaseN of every permit: got %v, want ErrNotHeld", err)
	}
}

// Several ReleaseN at once on one Permits: each gives back its own.
func TestSemaphoreReleaseNConcurrently(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	s := newClient(t, srv).Semaphore(uniqueName(t), 5)
	q := mustAcquire(t, s, 5)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := q.ReleaseN(ctx, 1); err != nil {
				t.Errorf("concurrent ReleaseN(1): %v", err)
			}
			_ = q.N()
		}()
	}
	wg.Wait()
	if q.N() != 1 {
		t.Errorf("N() = %d after four ReleaseN(1) of 5", q.N())
	}
	if n, err := s.Available(ctx); err != nil || n != 4 {
		t.Errorf("Available() = %d, %v; want 4", n, err)
	}
	if err := q.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// ReleaseN racing Release, renewals (a 300 ms TTL renews every 100 ms),
// Extend and TTL on one Permits: the permits are never taken for lost, and
// the other holder's are untouched.
func TestSemaphoreReleaseNBesideReleaseRenewalExtendAndTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(300*time.Millisecond))
	ctx := testCtx(t)
	name := uniqueName(t)
	s := c.Semaphore(name, 8)
	other := mustAcquire(t, s, 1)
	defer other.Release(ctx)
	for i := 0; i < 40; i++ {
		p := mustAcquire(t, s, 6)
		var wg sync.WaitGroup
		for j := 0; j < 3; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := p.ReleaseN(ctx, 1); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
					t.Errorf("ReleaseN: %v", err)
				}
			}()
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := p.Extend(ctx, 300*time.Millisecond); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("Extend: %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := p.TTL(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("TTL: %v", err)
			}
		}()
		time.Sleep(time.Duration(i%4) * 40 * time.Millisecond) // some rounds span a renewal
		if err := p.Release(ctx); err != nil {
			t.Errorf("round %d: Release: %v", i, err)
		}
		wg.Wait()
		if err := p.Err(); errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("round %d: permits taken for lost: %v", i, err)
		}
	}
	if n, err := s.Available(ctx); err != nil || n != 7 {
		t.Errorf("Available = %d, %v; want 7", n, err)
	}
	if err := other.Err(); err != nil {
		t.Errorf("other holder: %v", err)
	}
}

// TestSemaphoreReleaseNServesWaitersInOrder: permits given back by ReleaseN
// go to the waiters at once, in arrival order, stopping at the first that
// does not fit, as after Release.
func TestSemaphoreReleaseNServesWaitersInOrder(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	name := uniqueName(t)
	p := mustAcquire(t, c.Semaphore(name, 4), 4)
	var waiters []<-chan acquired
	for i, n := range []int{2, 1, 2} {
		waiters = append(waiters, acquireAsync(ctx, patientSem(t, srv, name, 4), n))
		waitSemQueued(t, srv, name, int64(i+1))
	}
	// Each ReleaseN grants in its script: the queue tells who was served
	// as soon as it returns.
	for i, step := range []struct{ n, queued int }{
		{1, 3}, // 1 free: the first wants 2
		{1, 2}, // 2 free: the first's 2
		{1, 1}, // 1 free: the second's 1
		{1, 1}, // every permit back (Release), 1 free: the third wants 2
	} {
		if err := p.ReleaseN(ctx, step.n); err != nil {
			t.Fatalf("step %d: ReleaseN(%d) of %d: %v", i, step.n, p.N(), err)
		}
		if n := srv.Client(t).ZCard(ctx, semKey(name)+":q").Val(); n != int64(step.queued) {
			t.Fatalf("step %d: %d waiters still queued, want %d", i, n, step.queued)
		}
	}
	if p.Err() == nil {
		t.Error("the permits are still held after the last ReleaseN")
	}
	first := awaitServed(t, waiters[0], "waiter 1")
	second := awaitServed(t, waiters[1], "waiter 2")
	if err := first.ReleaseN(ctx, 1); err != nil { // 2 free: the third's 2
		t.Fatal(err)
	}
	third := awaitServed(t, waiters[2], "waiter 3")
	if !(p.Token() < first.Token() && first.Token() < second.Token() && second.Token() < third.Token()) {
		t.Errorf("tokens %d, %d, %d after %d: the waiters were not served in arrival order",
			first.Token(), second.Token(), third.Token(), p.Token())
	}
}
