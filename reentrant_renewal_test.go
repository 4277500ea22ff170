package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

func TestReentrantRenewsOncePerOwner(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, counter := countingClient(t, srv)
	c, err := dlock.New(rdb, dlock.WithTTL(150*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := dlock.WithOwner(testCtx(t), "job")
	m := c.ReentrantMutex(t.Name())
	const holds = 8
	var leases []*dlock.Lease
	for i := 0; i < holds; i++ {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	before := counter.n.Load()
	time.Sleep(600 * time.Millisecond) // about 12 renewal periods of 50ms
	sent := counter.n.Load() - before
	for _, l := range leases {
		if err := l.Err(); err != nil {
			t.Fatalf("hold lost: %v", err)
		}
	}
	// One renewal per period for the owner: about 12 commands. One per hold
	// would be about 96.
	if sent > 40 {
		t.Errorf("%d commands for %d holds over ~12 renewal periods: renewals are per hold, not per owner", sent, holds)
	}
	if sent < 3 {
		t.Errorf("only %d commands: nothing renewed the lock", sent)
	}
	for _, l := range leases {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReentrantNoRenewalFollowsTheLastRelease: the owner's last Unlock waits
// for the renewal in flight and sends the release after it, so the renewal
// cannot land after the release (where it would find the key gone and
// declare the lease lost although Unlock succeeded).
func TestReentrantNoRenewalFollowsTheLastRelease(t *testing.T) {
	ctx := dlock.WithOwner(testCtx(t), "job")
	c, hook := clientWithHeldRenewals(t, ctx)
	l, err := c.ReentrantMutex(t.Name()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hook.holdRenewal(t)
	unlocked := make(chan error, 1)
	go func() { unlocked <- l.Unlock(ctx) }()
	select {
	case err := <-unlocked:
		t.Fatalf("Unlock returned (%v) while the renewal was still in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	hook.hold.Store(false)
	close(hook.resume)
	if err := <-unlocked; err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := l.Err(); errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("the lease reads as lost after a successful Unlock: %v", err)
	}
	hook.wantOrder(t, "renew", "release")
}

// TestReentrantConcurrentLastReleasesWaitForTheRenewal: when two goroutines
// release an owner's two holds at the same moment, either release may be
// the owner's last at the server, so the one that starts while the other
// is in flight waits for the renewal in flight too.
func TestReentrantConcurrentLastReleasesWaitForTheRenewal(t *testing.T) {
	ctx := dlock.WithOwner(testCtx(t), "job")
	c, hook := clientWithHeldRenewals(t, ctx)
	m := c.ReentrantMutex(t.Name())
	first, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hook.holdRenewal(t)
	hook.holdRelease.Store(true)
	firstDone := make(chan error, 1)
	go func() { firstDone <- first.Unlock(ctx) }()
	select {
	case <-hook.releaseStarted: // the first release is on hold, before the wire
	case <-time.After(10 * time.Second):
		t.Fatal("no release within 10s")
	}
	secondDone := make(chan error, 1)
	go func() { secondDone <- second.Unlock(ctx) }()
	select {
	case err := <-secondDone:
		t.Fatalf("the second Unlock returned (%v) while the first release and a renewal were in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	hook.hold.Store(false)
	close(hook.resume)
	if err := <-secondDone; err != nil {
		t.Fatalf("second Unlock: %v", err)
	}
	close(hook.releaseResume)
	if err := <-firstDone; err != nil {
		t.Fatalf("first Unlock: %v", err)
	}
	for _, l := range []*dlock.Lease{first, second} {
		if err := l.Err(); errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("a lease reads as lost after a successful Unlock: %v", err)
		}
	}
	hook.wantOrder(t, "renew", "release", "release")
	if n := holdCount(t, m, ctx); n != 0 {
		t.Errorf("HoldCount after both holds were unlocked = %d", n)
	}
}

// clientWithHeldRenewals returns a Client with a TTL of 3 s whose go-redis
// client carries a heldRenewals hook (and opts), the scripts loaded first so
// that the order the hook records has no EVAL fallbacks in it. The watchdog
// renews after 1 s, and a renewal held before the wire leaves the lease 2 s
// of validity: ample for a test that holds it for a moment, even when the
// process waits for a core on a loaded machine.
func clientWithHeldRenewals(t *testing.T, ctx context.Context, opts ...dlock.Option) (*dlock.Client, *heldRenewals) {
	t.Helper()
	srv := redistest.Shared(t)
	warm, err := newClient(t, srv).ReentrantMutex(t.Name() + "-warm").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	hook := &heldRenewals{
		started: make(chan struct{}, 1), resume: make(chan struct{}),
		releaseStarted: make(chan struct{}, 1), releaseResume: make(chan struct{}),
	}
	rdb.AddHook(hook)
	c, err := dlock.New(rdb, append([]dlock.Option{dlock.WithTTL(3 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, hook
}

// heldRenewals is a go-redis hook that, while hold is set, keeps the first
// renewal script (owned_extend) it sees from being sent until resume
// closes, and while holdRelease is set the first reentrant release until
// releaseResume closes; it records the order in which renewals and
// releases are sent.
type heldRenewals struct {
	hold    atomic.Bool
	started chan struct{}
	resume  chan struct{}
	once    sync.Once

	holdRelease    atomic.Bool
	releaseStarted chan struct{}
	releaseResume  chan struct{}
	releaseOnce    sync.Once

	mu    sync.Mutex
	order []string
}

func (h *heldRenewals) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *heldRenewals) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.before(cmd)
		return next(ctx, cmd)
	}
}

func (h *heldRenewals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.before(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h *heldRenewals) before(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 2 || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
		return
	}
	var op string
	switch fmt.Sprint(args[1]) { // the driver passes the script as a value whose String is its hash or source
	case scripts.OwnedExtend.Hash(), scripts.OwnedExtend.Source():
		op = "renew"
	case scripts.ReentrantRelease.Hash(), scripts.ReentrantRelease.Source():
		op = "release"
	default:
		return
	}
	switch {
	case op == "renew" && h.hold.Load():
		holdOnce(&h.once, h.started, h.resume)
	case op == "release" && h.holdRelease.Load():
		holdOnce(&h.releaseOnce, h.releaseStarted, h.releaseResume)
	}
	h.mu.Lock()
	h.order = append(h.order, op)
	h.mu.Unlock()
}

// holdOnce, the first time once runs, signals started and waits for resume.
func holdOnce(once *sync.Once, started chan<- struct{}, resume <-chan struct{}) {
	held := false
	once.Do(func() {
		held = true
		started <- struct{}{}
	})
	if held {
		<-resume
	}
}

// holdRenewal holds the watchdog's next renewal before the wire.
func (h *heldRenewals) holdRenewal(t *testing.T) {
	t.Helper()
	h.hold.Store(true)
	select {
	case <-h.started:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal within 10s")
	}
}

// wantOrder checks that the script calls began in the order want.
func (h *heldRenewals) wantOrder(t *testing.T, want ...string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.order) < len(want) || fmt.Sprint(h.order[:len(want)]) != fmt.Sprint(want) {
		t.Fatalf("script calls sent in the order %v, want %v first", h.order, want)
	}
}
