package dlock_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// What a wait learns about its owner must outlive the waitFor call that
// learnt it (TestGrantHeardAfterALaterAttemptIsIgnored covers one call).
// Two paths wait again for the same owner: a Mutex head that gives up
// passes its place to the next local waiter, and a Lock whose grant
// expired before it could claim it waits again. Either, forgetting it,
// would take a late grant for a new one and return a live lease beside
// another client's.

// lateGrantClient returns a Client whose commands go through cmd (with a
// short read timeout, so that commands cut off fail fast) and whose pub/sub
// goes through proxy ps, and a signal closed when it logs that it ignored
// a grant for name.
func lateGrantClient(t *testing.T, srv *redistest.Server, cmdAddr, name string, opts ...dlock.Option) (*dlock.Client, *redis.Client, *redistest.Proxy, *lossSignal) {
	ps := redistest.StartProxy(t, srv.Addr())
	cmd := redis.NewClient(&redis.Options{Addr: cmdAddr, ReadTimeout: 100 * time.Millisecond,
		WriteTimeout: 100 * time.Millisecond, DialTimeout: 100 * time.Millisecond})
	sub := redis.NewClient(&redis.Options{Addr: ps.Addr()})
	t.Cleanup(func() { _ = cmd.Close(); _ = sub.Close() })
	ignored := &lossSignal{name: name, message: "dlock: ignoring a grant heard after a later attempt found the lock taken", lost: make(chan struct{})}
	c, err := dlock.New(splitClient{Client: cmd, sub: sub}, append(opts, dlock.WithLogger(slog.New(ignored)))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, cmd, ps, ignored
}

// checkIgnoredThenGranted waits for w's log to say it ignored the late
// grant, or for claimFailed (nil: never), fails if waited delivers a lease
// meanwhile (a second holder beside other's) or returns at all, then
// releases other and expects waited's lease. A waiter may take a late grant
// for one it must claim (its validity, counted from the owner's last
// attempt, is spent): with its commands cut off the claim fails, and it
// must wait on.
func checkIgnoredThenGranted(t *testing.T, ignored *lossSignal, claimFailed <-chan struct{}, waited <-chan multiLockResult, other *dlock.Lease, restore func()) {
	t.Helper()
	ctx := testCtx(t)
	select {
	case r := <-waited:
		if r.err == nil {
			t.Fatalf("TWO HOLDERS: the waiter took the late grant (token %d) while another client holds the lock (token %d)", r.l.Token(), other.Token())
		}
		t.Fatalf("the waiter returned (%v) before the holder released", r.err)
	case <-claimFailed:
	case <-ignored.lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the late grant was neither taken nor ignored within 10 s")
	}
	restore()
	if err := other.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-waited:
		if r.err != nil {
			t.Fatalf("the waiter after the holder released: %v", r.err)
		}
		if err := r.l.Unlock(ctx); err != nil {
			t.Errorf("the waiter's Unlock: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not granted the lock within 10 s of its release")
	}
}

// A head whose grant is heard late gives up; the goroutine that takes over
// its place must still know that the lock was taken since.
func TestLateGrantToAHeadThatGaveUpIsIgnored(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	opts := []dlock.Option{dlock.WithTTL(10 * time.Second), dlock.WithWaiterLease(time.Second)} // a 1 s claim window
	ctx := testCtx(t)
	name := uniqueName(t)
	rdb := srv.Client(t)
	a, x := newClient(t, srv, opts...), newClient(t, srv, opts...)
	pc := redistest.StartProxy(t, srv.Addr())
	w, cmd, ps, ignored := lateGrantClient(t, srv, pc.Addr(), name, opts...)
	claimFailed := newFailureSignal(func(cmd redis.Cmder, err error) bool { return isScriptCall(cmd, scripts.OwnedExtend) })
	cmd.AddHook(claimFailed)

	held := mustLock(t, a, name)
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	head, second := make(chan error, 1), make(chan multiLockResult, 1)
	go func() { _, err := w.Mutex(name).Lock(hctx); head <- err }()
	key := lockKey(name)
	waitFor(t, 10*time.Second, func() bool {
		return rdb.ZCard(ctx, key+":q").Val() == 1 && rdb.PubSubNumSub(ctx, key).Val()[key] > 0
	}, "the head queued and subscribed")
	go func() {
		l, err := w.Mutex(name).Lock(ctx)
		second <- multiLockResult{l, err}
	}()
	waitFor(t, 10*time.Second, func() bool { return dlock.LocalWaiters(w, name) == 2 }, "a second goroutine behind the head")

	ps.HoldReplies(true) // the grant will be heard late
	pc.Blackhole(true)   // and the waiter cannot ask meanwhile
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var other *dlock.Lease
	waitFor(t, 10*time.Second, func() bool {
		l, err := x.Mutex(name).TryLock(ctx)
		other = l
		return err == nil
	}, "the lock for another client once the unclaimed grant expired")
	hcancel() // the head gives up: its place passes to the second goroutine
	if err := <-head; err == nil {
		t.Fatal("the head got the lock")
	}
	waitFor(t, 10*time.Second, func() bool { return dlock.GrantWaiters(w, key) == 1 }, "the second goroutine waiting as the head")
	ps.HoldReplies(false) // the old grant arrives now
	checkIgnoredThenGranted(t, ignored, claimFailed.seen, second, other, func() { pc.Blackhole(false) })
}

// dupHook fails Mutex acquire attempts while failAcquire is set, holds the
// first hand-off reply of a release (after the script ran) while
// holdRelease is set, and signals a claim (owned_extend) that found the
// lock gone.
type dupHook struct {
	failAcquire atomic.Bool
	holdRelease atomic.Bool
	releaseHeld chan struct{}
	resume      chan struct{}
	claimGone   chan struct{}
}

func (h *dupHook) after(cmd redis.Cmder) {
	c, _ := cmd.(*redis.Cmd)
	if c == nil {
		return
	}
	if _, handedOff := c.Val().([]any); handedOff && isScriptCall(cmd, scripts.MutexRelease) && h.holdRelease.CompareAndSwap(true, false) {
		h.releaseHeld <- struct{}{}
		<-h.resume
	}
	if isScriptCall(cmd, scripts.OwnedExtend) && c.Val() == int64(0) {
		select {
		case h.claimGone <- struct{}{}:
		default:
		}
	}
}

func (h *dupHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *dupHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.failAcquire.Load() && isScriptCall(cmd, scripts.MutexAcquire) {
			err := errors.New("injected: connection reset")
			cmd.SetErr(err)
			return err
		}
		err := next(ctx, cmd)
		h.after(cmd)
		return err
	}
}

func (h *dupHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if h.failAcquire.Load() && isScriptCall(cmd, scripts.MutexAcquire) {
				err := errors.New("injected: connection reset")
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.after(cmd)
		}
		return err
	}
}

// A grant is heard twice when the releasing goroutine is of the same
// Client: from the release's reply and by pub/sub. If the first copy comes
// too late to be claimed, the Lock waits again for the same owner, and the
// second copy must be known for the grant that expired.
func TestSecondCopyOfAnExpiredGrantIsIgnored(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	opts := []dlock.Option{dlock.WithTTL(10 * time.Second), dlock.WithWaiterLease(time.Second)}
	ctx := testCtx(t)
	name := uniqueName(t)
	rdb := srv.Client(t)
	x := newClient(t, srv, opts...)
	w, cmd, ps, ignored := lateGrantClient(t, srv, srv.Addr(), name, opts...)
	hook := &dupHook{releaseHeld: make(chan struct{}, 1), resume: make(chan struct{}), claimGone: make(chan struct{}, 1)}
	cmd.AddHook(hook)

	held, err := w.FairMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan multiLockResult, 1)
	go func() {
		l, err := w.FairMutex(name).Lock(ctx)
		waited <- multiLockResult{l, err}
	}()
	key := lockKey(name)
	waitFor(t, 10*time.Second, func() bool {
		return rdb.ZCard(ctx, key+":q").Val() == 1 && subscribedFor(ctx, rdb, key)
	}, "the waiter queued and subscribed")
	hook.failAcquire.Store(true) // the waiter's polls fail from now on
	hook.holdRelease.Store(true) // the release's reply, with the grant, is late
	ps.HoldReplies(true)         // and so is the grant's message
	unlocked := make(chan error, 1)
	go func() { unlocked <- held.Unlock(ctx) }()
	<-hook.releaseHeld
	var other *dlock.Lease
	waitFor(t, 10*time.Second, func() bool {
		l, err := x.Mutex(name).TryLock(ctx)
		other = l
		return err == nil
	}, "the lock for another client once the unclaimed grant expired")
	ps.HoldReplies(false) // the first copy: too late, its claim finds the lock gone
	select {
	case <-hook.claimGone:
	case r := <-waited:
		t.Fatalf("the waiter returned (%v) before its claim", r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("no claim found the lock gone")
	}
	waitFor(t, 10*time.Second, func() bool { return dlock.GrantWaiters(w, dlock.FairGrantChannel(w, name)) == 1 }, "the waiter waiting again")
	close(hook.resume) // the second copy, from the release's reply
	if err := <-unlocked; err != nil {
		t.Logf("the holder's Unlock: %v", err)
	}
	checkIgnoredThenGranted(t, ignored, nil, waited, other, func() { hook.failAcquire.Store(false) })
}

// subscribedFor reports whether a Client subscribes to a channel of the lock
// whose key is key: the key's own, or a FairMutex's grant channel
// (key:g<tag>, docs/waiting.md).
func subscribedFor(ctx context.Context, rdb *redis.Client, key string) bool {
	return len(rdb.PubSubChannels(ctx, key+"*").Val()) > 0
}
