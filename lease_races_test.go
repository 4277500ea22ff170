package dlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// scriptHold is a go-redis hook that, once armed, holds the first call of
// script: before it is sent (after false) or once its reply came back
// (after true), until resume closes. started receives when it holds.
type scriptHold struct {
	script  *driver.Script
	after   bool
	armed   atomic.Bool
	once    sync.Once
	started chan struct{}
	resume  chan struct{}
}

func newScriptHold(script *driver.Script, after bool) *scriptHold {
	return &scriptHold{script: script, after: after, started: make(chan struct{}, 1), resume: make(chan struct{})}
}

func (h *scriptHold) matches(cmd redis.Cmder) bool { return isScriptCall(cmd, h.script) }

func (h *scriptHold) hold(cmds ...redis.Cmder) {
	if !h.armed.Load() {
		return
	}
	for _, cmd := range cmds {
		if h.matches(cmd) {
			holdOnce(&h.once, h.started, h.resume)
			return
		}
	}
}

func (h *scriptHold) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptHold) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.after {
			h.hold(cmd)
		}
		err := next(ctx, cmd)
		if h.after {
			h.hold(cmd)
		}
		return err
	}
}

func (h *scriptHold) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.after {
			h.hold(cmds...)
		}
		err := next(ctx, cmds)
		if h.after {
			h.hold(cmds...)
		}
		return err
	}
}

// sentWithin reports whether the hook has seen n script calls (renewals
// and Extends) go out within d. It is for checking that a call is NOT sent:
// the fixed code never sends it, and on a broken one it goes out at once.
func sentWithin(h *heldRenewals, n int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		h.mu.Lock()
		sent := len(h.order)
		h.mu.Unlock()
		if sent >= n {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond) // polling the hook's record: a call that is never sent signals nothing
	}
}

// renewalSignal is an Observer that tells when the watchdog finished a
// renewal.
type renewalSignal struct{ renewed chan error }

func (o *renewalSignal) AcquireStart(ctx context.Context, _ dlock.Acquisition) (context.Context, func(dlock.AcquireOutcome)) {
	return ctx, func(dlock.AcquireOutcome) {}
}
func (o *renewalSignal) Renewed(_ dlock.LeaseInfo, err error) {
	select {
	case o.renewed <- err:
	default:
	}
}
func (o *renewalSignal) Lost(dlock.LeaseInfo, error)                      {}
func (o *renewalSignal) Released(context.Context, dlock.LeaseInfo, error) {}

// An Extend made while a renewal is on its way waits for it: sent at once,
// it could reach Redis first, and the renewal for the old TTL would then
// cut the key's expiry back under a lease counting on the Extend.
func TestExtendWaitsForTheRenewalInFlight(t *testing.T) {
	t.Parallel()
	ctx := dlock.WithOwner(testCtx(t), "warm") // clientWithHeldRenewals warms up with a ReentrantMutex
	obs := &renewalSignal{renewed: make(chan error, 1)}
	c, hook := clientWithHeldRenewals(t, ctx, dlock.WithObserver(obs))
	rdb := redistest.Shared(t).Client(t)
	name := uniqueName(t)
	l := mustLock(t, c, name, dlock.WithTTL(3*time.Second)) // renewed after 1 s; the checks below take 200 ms
	defer unlockLease(l)

	hook.holdRenewal(t) // the watchdog's renewal, before the wire
	extended := make(chan error, 1)
	go func() { extended <- l.Extend(ctx, time.Minute) }()
	if sentWithin(hook, 2, 200*time.Millisecond) {
		t.Error("the Extend went out while the renewal was still on its way")
	}
	close(hook.resume)
	select {
	case err := <-obs.renewed:
		if err != nil {
			t.Fatalf("the held renewal: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held renewal did not finish within 10 s")
	}
	if err := <-extended; err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if pttl := rdb.PTTL(ctx, lockKey(name)).Val(); pttl < 50*time.Second {
		t.Errorf("PTTL after the renewal and the Extend(1m) = %v, want about 1m: the renewal landed last and cut the expiry back", pttl)
	}
	if d, err := l.TTL(ctx); err != nil || d < 50*time.Second {
		t.Errorf("TTL = %v, %v; want about 1m", d, err)
	}
}

// Two Extends of one lease reach Redis one after the other, in the order
// they began, so the key ends with the later one's expiry, which is the
// one the lease counts on.
func TestConcurrentExtendsReachRedisInOrder(t *testing.T) {
	t.Parallel()
	ctx := dlock.WithOwner(testCtx(t), "warm") // clientWithHeldRenewals warms up with a ReentrantMutex
	c, hook := clientWithHeldRenewals(t, ctx)
	rdb := redistest.Shared(t).Client(t)
	name := uniqueName(t)
	l := mustLock(t, c, name, dlock.WithTTL(5*time.Second), dlock.WithAutoRenew(false))
	defer unlockLease(l)

	hook.hold.Store(true) // the next owned_extend: the first Extend's
	first := make(chan error, 1)
	go func() { first <- l.Extend(ctx, time.Second) }()
	<-hook.started
	second := make(chan error, 1)
	go func() { second <- l.Extend(ctx, time.Minute) }()
	if sentWithin(hook, 2, 200*time.Millisecond) {
		t.Error("the second Extend went out while the first was still on its way")
	}
	close(hook.resume)
	if err := <-first; err != nil {
		t.Fatalf("Extend(1s): %v", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("Extend(1m): %v", err)
	}
	if pttl := rdb.PTTL(ctx, lockKey(name)).Val(); pttl < 50*time.Second {
		t.Errorf("PTTL = %v after Extend(1s), then Extend(1m); want about 1m (the Extend(1s) landed last)", pttl)
	}
	if d, err := l.TTL(ctx); err != nil || d < 50*time.Second {
		t.Errorf("TTL = %v, %v; want about 1m", d, err)
	}
}

// A TTL that finds the key gone because an Unlock of the same lease
// released it is no loss: Unlock succeeds, and the lease ends as released.
func TestTTLRacingUnlockIsNoLoss(t *testing.T) {
	ctx := testCtx(t)
	read := newScriptHold(scripts.OwnedPTTL, false)      // TTL's read, before the wire
	release := newScriptHold(scripts.MutexRelease, true) // Unlock's release, once it ran
	obs := &recorder{}
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Shared(t).Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(read)
	rdb.AddHook(release)
	c, err := dlock.New(rdb, dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// Load the scripts first: a hook that holds an EVALSHA answered
	// NOSCRIPT would hold it before the script ran.
	name := uniqueName(t)
	warm := mustLock(t, c, name)
	if _, err := warm.TTL(ctx); err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := mustLock(t, c, name)

	// TTL finds the lease held and sends its read; Unlock releases the
	// lock before the read arrives, and has not heard back yet when the
	// read's answer, "not held", comes back.
	read.armed.Store(true)
	ttl := make(chan error, 1)
	go func() {
		_, err := l.TTL(ctx)
		ttl <- err
	}()
	<-read.started
	release.armed.Store(true)
	unlocked := make(chan error, 1)
	go func() { unlocked <- l.Unlock(ctx) }()
	<-release.started
	close(read.resume)
	if err := <-ttl; !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("TTL during the Unlock = %v; want ErrNotHeld (released), not a loss", err)
	}
	close(release.resume)
	if err := <-unlocked; err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Err after Unlock = %v; want ErrNotHeld (released), not ErrLockLost", err)
	}
	if n := len(obs.snapshot().lost); n != 0 {
		t.Errorf("Observer.Lost called %d times for a lease that Unlock released", n)
	}
}

// An Unlock that fails while the Client closes leaves a lease nothing
// renews: it must end as lost, as Close ends every lease it holds, not stay
// open with a nil Err.
func TestUnlockFailingAcrossCloseEndsTheLease(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	hook := newScriptHold(scripts.MutexRelease, false)
	rdb.AddHook(hook)
	c, err := dlock.New(rdb, dlock.WithReleaseTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	l := mustLock(t, c, uniqueName(t))

	proxy.Blackhole(true)
	hook.armed.Store(true)
	unlocked := make(chan error, 1)
	go func() { unlocked <- l.Unlock(context.Background()) }()
	<-hook.started // Unlock took the lease from the watchdog; the release goes out next
	if err := c.Close(); err != nil {
		t.Logf("Close: %v", err)
	}
	close(hook.resume)
	if err := <-unlocked; err == nil {
		t.Fatal("Unlock through a blackholed proxy succeeded")
	}
	proxy.Blackhole(false)
	waitDone(t, l, 5*time.Second)
	if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Err = %v, want ErrLockLost (the client was closed)", err)
	}
}

// Extend in the last moments of a WithMaxHold hold, when the key expires
// within MinTTL, reports ErrNotHeld, and the lease is then lost, as Extend's
// documentation says of ErrNotHeld.
func TestExtendAtTheMaxHoldEndLosesTheLease(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	c := newClient(t, srv)
	l := mustLock(t, c, uniqueName(t), dlock.WithMaxHold(300*time.Millisecond), dlock.WithAutoRenew(false))
	defer unlockLease(l)
	var err error
	for err == nil {
		err = l.Extend(ctx, time.Second) // capped at the hold's end
	}
	if errors.Is(err, dlock.ErrNotHeld) && l.Err() == nil {
		t.Errorf("Extend = %v, but the lease is not lost (Err nil)", err)
	}
}

// A Lock on a Client whose go-redis client was closed fails at once: no
// command can succeed again, so waiting until ctx ends would only hide it.
func TestLockWithAClosedRedisClientFailsAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	_ = rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err = c.Mutex(uniqueName(t)).Lock(ctx)
	if elapsed := time.Since(start); elapsed > 5*time.Second || !errors.Is(err, redis.ErrClosed) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock with a closed go-redis client = %v after %v; want redis.ErrClosed at once", err, elapsed)
	}
	if !errors.Is(err, driver.ErrClientClosed) {
		t.Errorf("Lock = %v; want it to match driver.ErrClientClosed", err)
	}
}

// A Lock already waiting when its go-redis client is closed returns at once,
// not at its next poll: the subscription hears the client close and wakes
// every waiter, whose attempt then fails for good. Waiters of every kind
// that waits (a Mutex's local line, the places of the other kinds) end.
func TestWaitingLockEndsWhenTheRedisClientCloses(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	holder := newClient(t, srv)
	name := uniqueName(t)
	held := mustLock(t, holder, name)
	defer unlockLease(held)
	sem := holder.Semaphore(name+"-sem", 1)
	permits, err := sem.Acquire(testCtx(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = permits.Release(context.Background()) }()

	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	// Polls every 10 s: only the subscription can end the waits sooner.
	c, err := dlock.New(rdb, dlock.WithWaiterLease(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waits := []func() error{
		func() error { _, err := c.Mutex(name).Lock(ctx); return err },
		func() error { _, err := c.Mutex(name).Lock(ctx); return err },
		func() error { _, err := c.FairMutex(name).Lock(ctx); return err },
		func() error { _, err := c.Semaphore(name+"-sem", 1).Acquire(ctx, 1); return err },
	}
	errs := make(chan error, len(waits))
	for _, wait := range waits {
		wait := wait
		go func() { errs <- wait() }()
	}
	// Every waiter queued and subscribed: the Mutex's and the FairMutex's
	// share the lock's queue, the Semaphore's has one of its own.
	waitFor(t, 10*time.Second, func() bool {
		a, _ := srv.Client(t).ZCard(ctx, "dlock:{"+name+"}:q").Result()
		b, _ := srv.Client(t).ZCard(ctx, "dlock:{"+name+"-sem}:sem:q").Result()
		return a == 2 && b == 1
	}, "waiters queued")
	waitFor(t, 10*time.Second, func() bool {
		mutexCh, semCh := lockKey(name), "dlock:{"+name+"-sem}:sem"
		n, _ := srv.Client(t).PubSubNumSub(ctx, mutexCh, semCh).Result()
		return n[mutexCh] >= 1 && n[semCh] >= 1
	}, "subscriptions")
	closed := time.Now()
	_ = rdb.Close()
	for range waits {
		select {
		case err := <-errs:
			if !errors.Is(err, driver.ErrClientClosed) {
				t.Errorf("wait = %v; want driver.ErrClientClosed", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("a wait went on for 15 s after its go-redis client closed")
		}
	}
	// A poll would come 10 s after the last; the wake-up, at once.
	if elapsed := time.Since(closed); elapsed > 5*time.Second {
		t.Errorf("the waits ended %v after the go-redis client closed; want at once", elapsed)
	}
}

// hookedClient wraps a go-redis client, as users do to add behaviour.
type hookedClient struct{ *redis.Client }

// New and NewRedlock refuse a nil pointer of any client type, not only of
// go-redis's own: its methods would panic at the first command.
func TestNewRefusesATypedNilWrapper(t *testing.T) {
	var nilWrapper *hookedClient
	if _, err := dlock.New(nilWrapper); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("New(a nil *hookedClient) = %v, want ErrInvalidArgument", err)
	}
	if _, err := dlock.NewRedlock([]dlock.RedisClient{nilWrapper}); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("NewRedlock(a nil *hookedClient) = %v, want ErrInvalidArgument", err)
	}
}

// An Extend whose ctx ends while its renewal is still on its way returns
// then, but the renewal stays in flight until the client library is done
// with it: an Unlock waits for it, so its release cannot reach Redis first
// (and a renewal landing after the release could not matter to anyone).
func TestUnlockWaitsForAnAbandonedExtend(t *testing.T) {
	ctx := dlock.WithOwner(testCtx(t), "warm") // clientWithHeldRenewals warms up with a ReentrantMutex
	c, hook := clientWithHeldRenewals(t, ctx)
	name := uniqueName(t)
	l, err := c.ReentrantMutex(name, dlock.WithTTL(5*time.Second), dlock.WithAutoRenew(false)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}

	hook.hold.Store(true) // the Extend's owned_extend, before the wire
	ectx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := l.Extend(ectx, time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Extend while its renewal is held: %v, want context.DeadlineExceeded", err)
	}
	unlocked := make(chan error, 1)
	go func() { unlocked <- l.Unlock(ctx) }()
	if sentWithin(hook, 1, 200*time.Millisecond) { // the held renewal is recorded once it goes
		t.Error("the release went out while the abandoned Extend was still on its way")
	}
	close(hook.resume)
	select {
	case err := <-unlocked:
		if err != nil {
			t.Fatalf("Unlock: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Unlock did not return within 10 s of the renewal going out")
	}
	hook.wantOrder(t, "renew", "release")
}
