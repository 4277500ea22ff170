package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A Semaphore nobody holds or waits for grants its permits in the solo
// form: one string under the holders key, "<owner> <permits> <token>"
// (sem_lib.lua). These tests take every path in and out of it.

// semForm reports the form of semaphore name's holders: "solo" (a string),
// "zset", or "none".
func semForm(t testing.TB, srv *redistest.Server, name string) string {
	t.Helper()
	switch typ := srv.Client(t).Type(context.Background(), semKey(name)).Val(); typ {
	case "string":
		return "solo"
	case "zset", "none":
		return typ
	default:
		t.Fatalf("holders of %q: a %s", name, typ)
		return ""
	}
}

// wantForm fails the test unless semaphore name's holders are in form.
func wantForm(t testing.TB, srv *redistest.Server, name, form, when string) {
	t.Helper()
	if got := semForm(t, srv, name); got != form {
		t.Fatalf("%s: holders in the %s form, want %s", when, got, form)
	}
}

// wantAvailable fails the test unless s has n permits free.
func wantAvailable(t testing.TB, s *dlock.Semaphore, n int, when string) {
	t.Helper()
	if got, err := s.Available(testCtx(t)); err != nil || got != n {
		t.Errorf("%s: Available() = %d, %v; want %d", when, got, err, n)
	}
}

// A solo holder of every permit, then a waiter: nobody can be granted, so
// the waiter queues and the holder stays solo; its release hands the
// permits to the waiter.
func TestSemaphoreSoloHolderHandsOverToWaiter(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	holder, waiter := newClient(t, srv), newClient(t, srv)
	s := holder.Semaphore(name, 2)
	p := mustAcquire(t, s, 2)
	wantForm(t, srv, name, "solo", "one holder")
	wantAvailable(t, s, 0, "every permit held")

	w := goAcquire(t, func(ctx context.Context) (*dlock.Permits, error) {
		return waiter.Semaphore(name, 2).Acquire(ctx, 1)
	}, releasePermits)
	waitSemQueued(t, srv, name, 1)
	wantForm(t, srv, name, "solo", "a waiter queued")
	if err := p.Err(); err != nil {
		t.Fatalf("the holder with a waiter queued: %v", err)
	}
	if d, err := p.TTL(ctx); err != nil || d <= 0 {
		t.Fatalf("the holder's TTL with a waiter queued: %v, %v", d, err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	q := w.await(t, 10*time.Second, "the waiter")
	if q.Token() <= p.Token() {
		t.Errorf("the waiter's token %d after the holder's %d", q.Token(), p.Token())
	}
	wantAvailable(t, s, 1, "the waiter holding 1")
	if err := q.Release(ctx); err != nil {
		t.Fatalf("the waiter's Release: %v", err)
	}
	wantAvailable(t, s, 2, "all released")
	if n := semKeysLeft(ctx, t, srv, name); n != 0 {
		t.Errorf("%d keys left after every permit was released", n)
	}
}

// Waiters that give up while a solo holder holds every permit leave it
// solo; once permits are free, a departing head that asked for more than
// is free lets a smaller request behind it through.
func TestSemaphoreSoloHolderStaysSoloWhileWaitersLeave(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	holder, waiter := newClient(t, srv), newClient(t, srv)
	s := holder.Semaphore(name, 3)
	p := mustAcquire(t, s, 3)
	leaveCtx, leave := context.WithCancel(ctx)
	left := goAcquire(t, func(context.Context) (*dlock.Permits, error) {
		return waiter.Semaphore(name, 3).Acquire(leaveCtx, 1)
	}, releasePermits)
	waitSemQueued(t, srv, name, 1)
	wantForm(t, srv, name, "solo", "a waiter queued behind every permit held")
	leave()
	if _, err := left.wait(t, 10*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter that gave up: %v; want context.Canceled", err)
	}
	waitSemQueued(t, srv, name, 0)
	wantForm(t, srv, name, "solo", "the waiter gone")

	// Two permits back: 2 free. A head asking for 3 blocks a request for 1
	// behind it until it leaves.
	if err := p.ReleaseN(ctx, 2); err != nil {
		t.Fatalf("ReleaseN: %v", err)
	}
	bigCtx, leaveBig := context.WithCancel(ctx)
	big := goAcquire(t, func(context.Context) (*dlock.Permits, error) {
		return waiter.Semaphore(name, 3).Acquire(bigCtx, 3)
	}, releasePermits)
	waitSemQueued(t, srv, name, 1)
	small := goAcquire(t, func(ctx context.Context) (*dlock.Permits, error) {
		return newClient(t, srv).Semaphore(name, 3).Acquire(ctx, 1)
	}, releasePermits)
	waitSemQueued(t, srv, name, 2)
	leaveBig()
	if _, err := big.wait(t, 10*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("the large request that gave up: %v; want context.Canceled", err)
	}
	q := small.await(t, 10*time.Second, "the request for 1 behind the one that left")
	if q.Token() <= p.Token() {
		t.Errorf("the small request's token %d after the holder's %d", q.Token(), p.Token())
	}
	wantAvailable(t, s, 1, "the holder keeping 1, the small request 1")
	if err := q.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A solo holder of 1 of 3, joined by two more: counts and tokens stay
// right through the conversion, and every release gives its permit back.
func TestSemaphoreSoloHolderJoinedByOthers(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	c := newClient(t, srv)
	s := c.Semaphore(name, 3)
	var held []*dlock.Permits
	for i := 0; i < 3; i++ {
		p, err := s.TryAcquire(ctx, 1)
		if err != nil {
			t.Fatalf("TryAcquire %d: %v", i+1, err)
		}
		if i > 0 && p.Token() <= held[i-1].Token() {
			t.Errorf("token %d after %d", p.Token(), held[i-1].Token())
		}
		held = append(held, p)
		wantForm(t, srv, name, map[bool]string{true: "solo", false: "zset"}[i == 0], fmt.Sprintf("%d holders", i+1))
		wantAvailable(t, s, 2-i, fmt.Sprintf("%d holders", i+1))
	}
	if _, err := s.TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("TryAcquire with every permit held: %v, want ErrNotObtained", err)
	}
	info := infoOf(t, mustInspect(t, c, name), dlock.KindSemaphore)
	if len(info.Holders) != 3 || info.Holders[0].Token != held[0].Token() || info.Holders[0].Owner != held[0].Owner() {
		t.Errorf("holders %+v, want the first holder (token %d) among three", info.Holders, held[0].Token())
	}
	for i, p := range held {
		if err := p.Release(ctx); err != nil {
			t.Fatalf("Release %d: %v", i+1, err)
		}
		wantAvailable(t, s, i+1, fmt.Sprintf("%d released", i+1))
	}
	if n := semKeysLeft(ctx, t, srv, name); n != 0 {
		t.Errorf("%d keys left after every permit was released", n)
	}
	// Free again: the next holder is solo once more.
	p := mustAcquire(t, s, 1)
	wantForm(t, srv, name, "solo", "a holder after all left")
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// ReleaseN from a solo holder keeps the rest under the same token.
func TestSemaphoreSoloHolderReleaseN(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	c := newClient(t, srv)
	s := c.Semaphore(name, 4)
	p := mustAcquire(t, s, 3)
	wantForm(t, srv, name, "solo", "one holder")
	token := p.Token()
	if err := p.ReleaseN(ctx, 1); err != nil {
		t.Fatalf("ReleaseN(1) of 3: %v", err)
	}
	if p.N() != 2 || p.Token() != token || p.Err() != nil {
		t.Errorf("after ReleaseN: N() %d, token %d (was %d), Err %v", p.N(), p.Token(), token, p.Err())
	}
	wantAvailable(t, s, 2, "2 of 4 held")
	info := infoOf(t, mustInspect(t, c, name), dlock.KindSemaphore)
	if len(info.Holders) != 1 || info.Holders[0].Permits != 2 || info.Holders[0].Token != token {
		t.Errorf("holders %+v, want one with 2 permits and token %d", info.Holders, token)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wantAvailable(t, s, 4, "all released")
}

// The watchdog renews a solo holder in its form, and Extend and TTL read
// and move its expiry.
func TestSemaphoreSoloHolderRenewed(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	const ttl = 600 * time.Millisecond
	c := newClient(t, srv, dlock.WithTTL(ttl))
	s := c.Semaphore(name, 2)
	p := mustAcquire(t, s, 1)
	rdb := srv.Client(t)
	value := rdb.Get(ctx, semKey(name)).Val()
	// Three renewals seen (every ttl/3): the key's PTTL back up after it
	// went down.
	for i := 0; i < 3; i++ {
		waitFor(t, 10*time.Second, func() bool { return rdb.PTTL(ctx, semKey(name)).Val() < ttl-150*time.Millisecond }, "the solo holder's PTTL to go down")
		waitFor(t, 10*time.Second, func() bool { return rdb.PTTL(ctx, semKey(name)).Val() > ttl-50*time.Millisecond }, "a renewal")
	}
	if err := p.Err(); err != nil {
		t.Fatalf("the renewed holder: %v", err)
	}
	if got := rdb.Get(ctx, semKey(name)).Val(); got != value {
		t.Errorf("holders %q after renewals, want %q", got, value)
	}
	if err := p.Extend(ctx, 20*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if d, err := p.TTL(ctx); err != nil || d <= 19*time.Second {
		t.Errorf("TTL() after Extend = %v, %v; want about 20s", d, err)
	}
	wantForm(t, srv, name, "solo", "after renewals and Extend")
	if err := p.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// Limit changes while a solo holder holds count its permits.
func TestSemaphoreSoloHolderAndLimitChanges(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	c := newClient(t, srv)
	s := c.Semaphore(name, 2)
	p := mustAcquire(t, s, 2)
	if err := s.SetPermits(ctx, 3); err != nil {
		t.Fatalf("SetPermits: %v", err)
	}
	wantAvailable(t, s, 1, "2 of 3 held")
	q, err := s.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatalf("TryAcquire of the added permit: %v", err)
	}
	if limit, err := s.AddPermits(ctx, -1); err != nil || limit != 2 {
		t.Fatalf("AddPermits(-1) = %d, %v", limit, err)
	}
	wantAvailable(t, s, 0, "3 held of a lowered limit of 2")
	if err := p.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wantAvailable(t, s, 1, "1 of 2 held")
	if err := q.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// With a limit stored, a lone holder is a zset's: the stored limit
	// needs reading, which the fast path does not do.
	r := mustAcquire(t, s, 2)
	wantForm(t, srv, name, "zset", "a holder under a stored limit")
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A Client's acquisitions of every permit pass them on to each other
// locally, from a solo holder too.
func TestSemaphoreSoloHolderHandsOverLocally(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	c := newClient(t, srv)
	dlock.SetStandbyGrace(c, time.Minute)
	s := c.Semaphore(name, 1)
	p := mustAcquire(t, s, 1)
	wantForm(t, srv, name, "solo", "one holder")
	w := goAcquire(t, func(ctx context.Context) (*dlock.Permits, error) { return s.Acquire(ctx, 1) }, releasePermits)
	waitFor(t, 10*time.Second, func() bool { return dlock.LineWaiters(c, semHolders(name)) == 1 }, "the second acquisition to line up")
	if err := p.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	q := w.await(t, 10*time.Second, "the local hand-off")
	if q.Token() <= p.Token() {
		t.Errorf("token %d after %d", q.Token(), p.Token())
	}
	wantAvailable(t, s, 0, "the permit passed on")
	info := infoOf(t, mustInspect(t, c, name), dlock.KindSemaphore)
	if len(info.Holders) != 1 || info.Holders[0].Owner != q.Owner() || info.Holders[0].Token != q.Token() {
		t.Errorf("holders %+v, want the new holder with token %d", info.Holders, q.Token())
	}
	if err := q.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wantAvailable(t, s, 1, "all released")
}

// A solo holder that stops renewing (its process died) frees its permits
// within its TTL.
func TestSemaphoreSoloHolderDies(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	dead := newClient(t, srv, dlock.WithTTL(500*time.Millisecond), dlock.WithAutoRenew(false))
	p := mustAcquire(t, dead.Semaphore(name, 1), 1)
	wantForm(t, srv, name, "solo", "one holder")
	start := time.Now()
	q := mustAcquire(t, newClient(t, srv).Semaphore(name, 1), 1)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("waited %v for a dead holder's 500ms permits", d)
	}
	if q.Token() <= p.Token() {
		t.Errorf("token %d after the dead holder's %d", q.Token(), p.Token())
	}
	if err := q.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the dead holder's Release: %v, want ErrNotHeld", err)
	}
}

// Inspect and List show a solo holder as a zset's, and ForceUnlock clears
// it.
func TestSemaphoreSoloHolderInspected(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	c := newClient(t, srv, dlock.WithOwnerInfo("solo-1"), dlock.WithTTL(heldTTL))
	s := c.Semaphore(name, 3)
	p := mustAcquire(t, s, 2)
	wantForm(t, srv, name, "solo", "one holder")
	waitFor(t, 10*time.Second, func() bool {
		info := infoOf(t, mustInspect(t, c, name), dlock.KindSemaphore)
		return len(info.Holders) == 1 && info.Holders[0].HeldFor > 0
	}, "the holder's start recorded")
	list, err := c.List(ctx, name)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for what, infos := range map[string][]dlock.LockInfo{"Inspect": mustInspect(t, c, name), "List": list} {
		info := infoOf(t, infos, dlock.KindSemaphore)
		if len(info.Holders) != 1 {
			t.Fatalf("%s: holders %+v, want one", what, info.Holders)
		}
		h := info.Holders[0]
		if h.Owner != p.Owner() || h.Info != "solo-1" || h.Permits != 2 || h.Token != p.Token() || h.TTL <= 0 || h.TTL > heldTTL || h.HeldFor <= 0 {
			t.Errorf("%s: holder %+v, want owner %s (solo-1) with 2 permits, token %d, a TTL up to %v and a hold time", what, h, p.Owner(), p.Token(), heldTTL)
		}
		if info.LastToken != p.Token() {
			t.Errorf("%s: last token %d, want %d", what, info.LastToken, p.Token())
		}
	}
	if n, err := c.ForceUnlock(ctx, name); err != nil || n != 1 {
		t.Fatalf("ForceUnlock = %d, %v; want 1 released", n, err)
	}
	wantForm(t, srv, name, "none", "after ForceUnlock")
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Error("the forced holder's loss was not signalled")
	}
	wantAvailable(t, s, 3, "after ForceUnlock")
}

// A string under the holders key that no semaphore wrote (no expiry, or
// not a solo holder's value) is reported by every operation and left.
func TestSemaphoreForeignStringUnderHolders(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	rdb := srv.Client(t)
	c := newClient(t, srv)
	for i, v := range []struct {
		value string
		ttl   time.Duration
	}{
		{"someone 1 12345", 0},    // a solo holder's shape, without an expiry
		{"no numbers", time.Hour}, // an expiry, but not a solo holder's value
		{"17", time.Hour},
	} {
		name := fmt.Sprintf("%s-%d", t.Name(), i)
		rdb.Set(ctx, semKey(name), v.value, v.ttl)
		s := c.Semaphore(name, 2)
		for what, try := range map[string]func() error{
			"TryAcquire": func() error { _, err := s.TryAcquire(ctx, 1); return err },
			"Acquire":    func() error { _, err := s.Acquire(ctx, 1); return err },
			"SetPermits": func() error { return s.SetPermits(ctx, 3) },
			"Available":  func() error { _, err := s.Available(ctx); return err },
			"Inspect":    func() error { _, err := c.Inspect(ctx, name); return err },
		} {
			if err := try(); !errors.Is(err, dlock.ErrKeyConflict) {
				t.Errorf("%s with %q under the holders key: %v, want ErrKeyConflict", what, v.value, err)
			}
		}
		if got := rdb.Get(ctx, semKey(name)).Val(); got != v.value {
			t.Errorf("the foreign value %q became %q", v.value, got)
		}
		if n := rdb.Exists(ctx, semKey(name)+":n", semKey(name)+":limit", semKey(name)+":q").Val(); n != 0 {
			t.Errorf("%d keys written beside the foreign value %q", n, v.value)
		}
	}
}
