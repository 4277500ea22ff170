package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// multiLockResult is what a MultiLock.Lock run in a goroutine returned.
type multiLockResult struct {
	l   *dlock.Lease
	err error
}

// lockInBackground runs ml.Lock(ctx) in a goroutine and delivers its result.
func lockInBackground(ctx context.Context, ml *dlock.MultiLock) <-chan multiLockResult {
	got := make(chan multiLockResult, 1)
	go func() {
		l, err := ml.Lock(ctx)
		got <- multiLockResult{l, err}
	}()
	return got
}

// checkHoldsAll waits for Lock's result and checks that it is a lease that
// holds every one of names, then unlocks it and checks that nothing is left.
func checkHoldsAll(t *testing.T, srv *redistest.Server, got <-chan multiLockResult, names ...string) {
	t.Helper()
	ctx := testCtx(t)
	var r multiLockResult
	select {
	case r = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("Lock did not return once every lock was free")
	}
	if r.err != nil {
		t.Fatalf("Lock: %v", r.err)
	}
	if err := r.l.Err(); err != nil {
		t.Fatalf("Lock returned a nil error and a lease that was already over (Err = %v)", err)
	}
	rdb := srv.Client(t)
	for _, name := range names {
		if v := rdb.Get(ctx, lockKey(name)).Val(); v != dlock.LeaseOwner(r.l) {
			t.Errorf("%s holds %q, not the returned lease's owner %q", name, v, dlock.LeaseOwner(r.l))
		}
	}
	if err := r.l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	for _, name := range names {
		waitFor(t, 10*time.Second, func() bool {
			return rdb.Exists(ctx, lockKey(name), lockKey(name)+":q").Val() == 0
		}, "nothing left of "+name+" after Unlock")
	}
}

// A MultiLock.Lock holds "a" while it waits for "b"; an operator
// force-releases "a" and Z takes it. Lock must notice the loss while it
// waits, give back what it holds, leave b's queue and wait for "a" again (as
// a fresh owner, from the first lock in canonical order), and return only a
// lease that holds both locks: never, as it once did, a nil error with a
// lease already lost while Z held "a".
func TestMultiLockWaitRetakesALockLostMeanwhile(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	// Unique names: the waits leave queue entries behind for a moment, and
	// a rerun (-count) must not meet them.
	p := t.Name() + ":" + dlock.NewOwnerID()[:8] + ":"
	a, b := p+"a", p+"b"
	c := newClient(t, srv, dlock.WithTTL(600*time.Millisecond))
	x, z, op := newClient(t, srv), newClient(t, srv), newClient(t, srv)
	rdb := srv.Client(t)

	hb, got, firstOwner := holdFirstQueueForSecond(t, ctx, rdb, x, c, a, b)

	if n, err := op.ForceUnlock(ctx, a); err != nil || n != 1 {
		t.Fatalf("ForceUnlock(a) = %d, %v", n, err)
	}
	za := mustLock(t, z, a)
	// The renewal of "a" (every TTL/3) finds it gone; the wait for "b"
	// ends there and then, and Lock queues for "a" behind Z as a fresh
	// owner. (Not "b's queue is empty": a refresh of the old owner's place
	// there, in flight when its wait ended, may land after the clean-up
	// that removed it, and stays until its waiter lease ends.)
	waitFor(t, 10*time.Second, func() bool {
		q := rdb.ZRange(ctx, lockKey(a)+":q", 0, -1).Val()
		return len(q) == 1 && q[0] != firstOwner && rdb.ZScore(ctx, lockKey(b)+":q", q[0]).Err() != nil
	}, "the MultiLock to notice it lost a and queue for a again as a fresh owner")
	checkStillWaiting(t, got, "Z held a")

	if err := hb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := za.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, lockKey(a)).Val(); v == firstOwner {
		t.Errorf("the MultiLock took a back as the owner that lost it (%q): its clean-up could release it", v)
	}
	checkHoldsAll(t, srv, got, a, b)
}

// lossSignal is a slog.Handler that closes lost when the loss of the lock
// called name is logged, or, with message set, when that message is logged
// about it.
type lossSignal struct {
	name    string
	message string // "dlock: lock lost" when empty
	once    sync.Once
	lost    chan struct{}
}

func (h *lossSignal) Enabled(context.Context, slog.Level) bool { return true }
func (h *lossSignal) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *lossSignal) WithGroup(string) slog.Handler            { return h }

func (h *lossSignal) Handle(_ context.Context, r slog.Record) error {
	if want := h.message; r.Message != want && (want != "" || r.Message != "dlock: lock lost") {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "lock" && a.Value.String() == h.name {
			h.once.Do(func() { close(h.lost) })
			return false
		}
		return true
	})
	return nil
}

// The same without an operator: Redis stops answering while a MultiLock.Lock
// holds "a" and waits for "b", for longer than the validity of "a", so the
// watchdog declares "a" lost. Once Redis is back, Lock must take "a" again
// before it returns, not hand back a lease whose "a" is already lost.
func TestMultiLockWaitRetakesALockLostInAnOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := testCtx(t)
	p := t.Name() + ":"
	a, b := p+"a", p+"b"
	h := &lossSignal{name: a, lost: make(chan struct{})}
	c := newClient(t, srv, dlock.WithTTL(600*time.Millisecond), dlock.WithLogger(slog.New(h)))
	x := newClient(t, srv) // its lease of "b" (30 s) outlives the outage
	rdb := srv.Client(t)

	hb, got, firstOwner := holdFirstQueueForSecond(t, ctx, rdb, x, c, a, b)

	srv.Pause()
	select {
	case <-h.lost:
	case <-time.After(10 * time.Second):
		srv.Resume()
		t.Fatal("the watchdog never declared a lost while Redis was paused")
	}
	srv.Resume()

	// "a" expires on the server just after its local deadline; Lock takes
	// it again, as a fresh owner, and queues for "b" once more. (The old
	// owner may be queued there too, for up to its waiter lease: a refresh
	// in flight when its wait ended can reach Redis after the clean-up
	// that removed it, on another connection.)
	waitFor(t, 20*time.Second, func() bool {
		v := rdb.Get(ctx, lockKey(a)).Val()
		return v != "" && v != firstOwner && rdb.ZScore(ctx, lockKey(b)+":q", v).Err() == nil
	}, "the MultiLock to take a again after the outage and queue for b")
	checkStillWaiting(t, got, "x held b")
	if err := hb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	checkHoldsAll(t, srv, got, a, b)
}

// holdFirstQueueForSecond takes b with x, starts c's MultiLock(a, b).Lock,
// and waits until that Lock holds a and is queued for b. It returns x's
// lease of b, where Lock's result arrives, and the owner value holding a.
func holdFirstQueueForSecond(t *testing.T, ctx context.Context, rdb *redis.Client, x, c *dlock.Client, a, b string) (*dlock.Lease, <-chan multiLockResult, string) {
	t.Helper()
	hb := mustLock(t, x, b)
	got := lockInBackground(ctx, c.MultiLock(a, b))
	var firstOwner string
	waitFor(t, 10*time.Second, func() bool {
		firstOwner = rdb.Get(ctx, lockKey(a)).Val()
		return firstOwner != "" && rdb.ZCard(ctx, lockKey(b)+":q").Val() == 1
	}, "the MultiLock to hold a and queue for b")
	return hb, got, firstOwner
}

// checkStillWaiting fails the test if Lock has returned already, while
// (why) it could not hold every lock.
func checkStillWaiting(t *testing.T, got <-chan multiLockResult, why string) {
	t.Helper()
	select {
	case r := <-got:
		t.Fatalf("Lock returned (%v, Err %v) while %s", r.err, errOf(r.l), why)
	default:
	}
}

// errOf is l.Err(), or nil without a lease.
func errOf(l *dlock.Lease) error {
	if l == nil {
		return nil
	}
	return l.Err()
}

// A MultiLock lease that lost one lock releases the others in the
// background. Its Unlock must wait for that release: it returned at once,
// with the other locks still held for a moment, so the caller's next step
// could find its own released locks taken.
func TestUnlockOfALostMultiLockWaitsForItsOtherLocks(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	p := t.Name() + ":" + dlock.NewOwnerID()[:8] + ":"
	a, b := p+"a", p+"b"
	hold := newScriptHold(scripts.MutexRelease, false) // the background release, before the wire
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(hold)
	c, err := dlock.New(rdb, dlock.WithTTL(900*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	op := newClient(t, srv)
	ml := c.MultiLock(a, b)
	// Load the scripts first: a held EVALSHA answered NOSCRIPT would be
	// held before the script ran.
	warm, err := ml.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := ml.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hold.armed.Store(true)
	if _, err := op.ForceUnlock(ctx, a); err != nil {
		t.Fatalf("ForceUnlock(a): %v", err)
	}
	waitDone(t, l, 10*time.Second) // the next renewal finds a gone
	<-hold.started                 // the release of b, held

	unlocked := make(chan error, 1)
	go func() { unlocked <- l.Unlock(ctx) }()
	select {
	case err := <-unlocked:
		t.Fatalf("Unlock returned (%v) while the release of b was still on its way", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(hold.resume)
	if err := <-unlocked; !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock of the lost lease = %v; want ErrNotHeld", err)
	}
	if n := srv.Client(t).Exists(ctx, lockKey(b)).Val(); n != 0 {
		t.Errorf("b is still held when Unlock returned")
	}
}

// A TryLock that stalls between its take and its lease, past the locks'
// validity, must not return a lease: it returned one with a nil error
// while its locks had expired on the server (anyone could hold them), and
// the lease reported the loss only a moment later.
func TestMultiLockTryLockStalledPastValidityReturnsNoLease(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	p := t.Name() + ":" + dlock.NewOwnerID()[:8] + ":"
	a, b := p+"a", p+"b"
	hold := newScriptHold(scripts.MultiAcquire, true) // the take's reply, once it came back
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(hold)
	c, err := dlock.New(rdb, dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ml := c.MultiLock(a, b)
	warm, err := ml.TryLock(ctx) // loads the script: a held NOSCRIPT reply would be no take
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	hold.armed.Store(true)
	got := make(chan multiLockResult, 1)
	go func() {
		l, err := ml.TryLock(ctx)
		got <- multiLockResult{l, err}
	}()
	<-hold.started
	time.Sleep(600 * time.Millisecond) // the stall: twice the TTL, so the locks expire on the server
	close(hold.resume)
	r := <-got
	if r.l != nil || !errors.Is(r.err, dlock.ErrNotObtained) {
		var lerr error
		if r.l != nil {
			lerr = r.l.Err()
		}
		t.Fatalf("TryLock stalled past its locks' validity = lease %v (Err %v), error %v; want no lease and ErrNotObtained", r.l != nil, lerr, r.err)
	}
	if !errors.Is(r.err, dlock.ErrLockLost) {
		t.Errorf("TryLock's error %q does not say a lock was lost", r.err)
	}
	if n := srv.Client(t).Exists(ctx, lockKey(a), lockKey(b)).Val(); n != 0 {
		t.Errorf("%d of the two locks still held after TryLock returned", n)
	}
}

// holdExtends is a go-redis hook that, once armed, holds back the renewals
// (owned_extend) of the keys it matches, alone or in a pipeline, until
// release is closed; entered is closed when the first is held.
type holdExtends struct {
	match   func(key string) bool
	armed   chan struct{}
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *holdExtends) hold(cmds ...redis.Cmder) {
	select {
	case <-h.armed:
	default:
		return
	}
	for _, cmd := range cmds {
		if isScriptCall(cmd, scripts.OwnedExtend) && h.match(scriptKey(cmd)) {
			h.once.Do(func() { close(h.entered) })
			<-h.release
			return
		}
	}
}

func (h *holdExtends) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdExtends) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.hold(cmd)
		return next(ctx, cmd)
	}
}

func (h *holdExtends) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.hold(cmds...)
		return next(ctx, cmds)
	}
}

// TestMultiLockUnlockBehindAPendingRenewalRenewsNothing: a MultiLock's
// Unlock whose locks' renewal in flight does not return within the release
// timeout sends no release for them, fails, and ends the lease lost; the
// locks must then expire within their TTL (or be released by Unlock called
// again), as the lost lease says. A lock's own lease handed back to the
// watchdog would be renewed once the renewal returned, for as long as the
// Client lived, and nothing would free its locks unless Unlock was retried.
func TestMultiLockUnlockBehindAPendingRenewalRenewsNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := redis.NewClient(srv.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	name := t.Name()
	a, b := name+":a", name+":b"
	h := &holdExtends{
		match:   func(k string) bool { return k == lockKey(a) || k == lockKey(b) },
		armed:   make(chan struct{}),
		entered: make(chan struct{}),
		release: make(chan struct{}),
	}
	rdb.AddHook(h)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := testCtx(t)
	const ttl = 600 * time.Millisecond
	l, err := c.MultiLock(a, b).With(dlock.WithTTL(ttl), dlock.WithReleaseTimeout(100*time.Millisecond)).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	close(h.armed)
	select {
	case <-h.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal in 5s")
	}
	uerr := l.Unlock(ctx)
	close(h.release)
	if uerr == nil {
		t.Fatal("Unlock behind a renewal held back: nil error")
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("after the failed Unlock (%v), Err = %v, want ErrLockLost", uerr, err)
	}
	check := srv.Client(t)
	waitFor(t, 4*ttl, func() bool { return check.Exists(ctx, lockKey(a), lockKey(b)).Val() == 0 },
		fmt.Sprintf("the locks to expire after a failed Unlock (%v) and a lost lease (%v): renewed by nobody's lease", uerr, l.Err()))
	if err := l.Unlock(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock again: %v", err)
	}
}
