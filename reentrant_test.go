package dlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func init() {
	registerChildMode("reentrant-hold", func(ctx context.Context, c *dlock.Client, name string, ready func()) error {
		ctx = dlock.WithOwner(ctx, "child")
		m := c.ReentrantMutex(name, dlock.WithTTL(time.Second))
		for i := 0; i < 2; i++ {
			if _, err := m.Lock(ctx); err != nil {
				return err
			}
		}
		ready()
		return nil
	})
}

func reentrantKey(name string) string { return "dlock:{" + name + "}:re" }

func holdCount(t *testing.T, m *dlock.ReentrantMutex, ctx context.Context) int {
	t.Helper()
	n, err := m.HoldCount(ctx)
	if err != nil {
		t.Fatalf("HoldCount: %v", err)
	}
	return n
}

func TestReentrantHoldsNestAndCount(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c, other := newClient(t, srv), newClient(t, srv)
	name := t.Name()
	ctx := dlock.WithOwner(testCtx(t), "job-1")
	m := c.ReentrantMutex(name)

	var leases []*dlock.Lease
	for i := 1; i <= 3; i++ {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatalf("Lock %d: %v", i, err)
		}
		leases = append(leases, l)
		if n := holdCount(t, m, ctx); n != i {
			t.Fatalf("after %d locks HoldCount = %d", i, n)
		}
	}
	if leases[1].Token() != leases[0].Token() {
		t.Errorf("nested holds carry the grant's token: %d and %d", leases[0].Token(), leases[1].Token())
	}
	otherCtx := dlock.WithOwner(testCtx(t), "job-2")
	if _, err := m.TryLock(otherCtx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("another owner on the same client: got %v, want ErrNotObtained", err)
	}
	if _, err := other.ReentrantMutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("the same owner id on another client: got %v, want ErrNotObtained (reentrancy is per Client)", err)
	}
	if n := holdCount(t, m, otherCtx); n != 0 {
		t.Errorf("HoldCount of a non-holder = %d", n)
	}

	for i, l := range leases[:2] {
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock %d: %v", i, err)
		}
		select {
		case <-l.Done():
		default:
			t.Error("Done not closed after its Unlock")
		}
		if err := leases[2].Err(); err != nil {
			t.Fatalf("the remaining hold ended with an earlier one: %v", err)
		}
	}
	if _, err := m.TryLock(otherCtx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("released before the last hold: %v", err)
	}
	if err := leases[0].Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Unlock of one hold: got %v, want ErrNotHeld", err)
	}
	if err := leases[2].Unlock(ctx); err != nil {
		t.Fatalf("last Unlock: %v", err)
	}
	l, err := m.TryLock(otherCtx)
	if err != nil {
		t.Fatalf("lock not free after the last hold: %v", err)
	}
	_ = l.Unlock(ctx)
	if n := srv.Client(t).Exists(ctx, reentrantKey(name), reentrantKey(name)+":holds").Val(); n != 0 {
		t.Errorf("%d keys left after the last Unlock", n)
	}
}

func TestReentrantNeedsAnOwner(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, counter := countingClient(t, srv)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t)
	m := c.ReentrantMutex(t.Name())
	for name, ctx := range map[string]context.Context{
		"no owner":       ctx,
		"empty owner":    dlock.WithOwner(ctx, ""),
		"owner with ';'": dlock.WithOwner(ctx, "a;b"),
	} {
		if _, err := m.Lock(ctx); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: Lock got %v, want ErrInvalidArgument", name, err)
		}
		if _, err := m.HoldCount(ctx); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: HoldCount got %v, want ErrInvalidArgument", name, err)
		}
	}
	if n := counter.n.Load(); n != 0 {
		t.Errorf("rejected calls sent %d commands", n)
	}
}

// TestReentrantAcquireTimedOutAfterTheServerRanItDoesNotDoubleCount is
// Redisson issue #7367: the reply of a nested acquire is held back until its
// caller times out, so the server counted a hold the caller never got.
func TestReentrantAcquireTimedOutAfterTheServerRanItDoesNotDoubleCount(t *testing.T) {
	t.Parallel()
	c, proxy := clientThroughProxy(t)
	ctx := dlock.WithOwner(testCtx(t), "job")
	m := c.ReentrantMutex(t.Name())
	first, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}

	proxy.HoldReplies(true)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = m.Lock(short)
	cancel()
	if err == nil {
		t.Fatal("the nested Lock succeeded although its reply was held back")
	}
	proxy.HoldReplies(false)

	direct := newClient(t, redistest.Shared(t))
	waitFor(t, 10*time.Second, func() bool {
		n, err := m.HoldCount(ctx)
		return err == nil && n == 1
	}, "the timed-out hold to be taken back (HoldCount 1)")
	if err := first.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	l, err := direct.ReentrantMutex(t.Name()).TryLock(dlock.WithOwner(ctx, "someone-else"))
	if err != nil {
		t.Fatalf("the lock is still held after its only real hold was unlocked: %v", err)
	}
	_ = l.Unlock(ctx)
}

func TestReentrantWaiterIsHandedTheLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv)
	name := t.Name()
	ctxA := dlock.WithOwner(testCtx(t), "a")
	ctxB := dlock.WithOwner(testCtx(t), "b")
	l1, _ := a.ReentrantMutex(name).Lock(ctxA)
	l2, err := a.ReentrantMutex(name).Lock(ctxA)
	if err != nil || l1 == nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		m := b.ReentrantMutex(name)
		l, err := m.Lock(ctxB)
		if err == nil {
			var n int
			if n, err = m.HoldCount(ctxB); err == nil && n != 1 {
				err = errors.New("the handed-over lock does not count the waiter's hold")
			}
			if uerr := l.Unlock(ctxB); err == nil {
				err = uerr
			}
		}
		got <- err
	}()
	waitFor(t, 10*time.Second, func() bool {
		return srv.Client(t).ZCard(context.Background(), reentrantKey(name)+":q").Val() == 1
	}, "the waiter to queue")
	_ = l2.Unlock(ctxA)
	select {
	case err := <-got:
		t.Fatalf("the waiter got the lock while a hold remained: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	start := time.Now()
	_ = l1.Unlock(ctxA)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("the waiter got the lock %v after the last release", d)
	}
}

func TestReentrantHoldsAreLostTogether(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(300*time.Millisecond))
	name := t.Name()
	ctx := dlock.WithOwner(testCtx(t), "job")
	m := c.ReentrantMutex(name)
	l1, _ := m.Lock(ctx)
	l2, err := m.Lock(ctx)
	if err != nil || l1 == nil {
		t.Fatal(err)
	}
	srv.Client(t).Del(ctx, reentrantKey(name))
	for _, l := range []*dlock.Lease{l1, l2} {
		waitDone(t, l, 5*time.Second)
		if !errors.Is(l.Err(), dlock.ErrLockLost) {
			t.Errorf("Err() = %v, want ErrLockLost", l.Err())
		}
	}
	// The owner can take the lock again afresh.
	l3, err := m.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock after the loss: %v", err)
	}
	if n := holdCount(t, m, ctx); n != 1 {
		t.Errorf("HoldCount after re-locking = %d, want 1", n)
	}
	_ = l3.Unlock(ctx)
}

func TestReentrantConcurrentHoldsOfOneOwner(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	name := t.Name()
	ctx := dlock.WithOwner(testCtx(t), "job")
	m := c.ReentrantMutex(name)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Errorf("Lock: %v", err)
					return
				}
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("Unlock: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := holdCount(t, m, ctx); n != 0 {
		t.Errorf("HoldCount after every hold was unlocked = %d", n)
	}
	if n := srv.Client(t).Exists(ctx, reentrantKey(name)).Val(); n != 0 {
		t.Error("the lock is still held")
	}
}

func TestReentrantKilledHolderFreesTheLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	holder := startChild(t, srv.Addr(), "reentrant-hold", name) // two holds, TTL 1s
	c := newClient(t, srv)
	ctx := dlock.WithOwner(testCtx(t), "parent")
	if _, err := c.ReentrantMutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("the child's lock is not held: %v", err)
	}
	killed := time.Now()
	holder.kill()
	l, err := c.ReentrantMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if d := time.Since(killed); d > 2500*time.Millisecond {
		t.Errorf("got the killed holder's lock after %v; want within its 1s TTL plus a poll", d)
	}
}

// An owner's holds that waited while another owner held the lock all join
// the first of them to be granted, without waiting for a poll: a grant
// names one hold, the one that queued in Redis for the Client's line, and
// the others wait behind it in the line.
func TestReentrantQueuedHoldsOfOneOwnerJoinTheGrant(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	// Polls every min(TTL, waiter lease)/3 = 10 s: far beyond the bound below.
	c := newClient(t, srv, dlock.WithWaiterLease(30*time.Second))
	name := t.Name()
	m := c.ReentrantMutex(name)
	ctxA := dlock.WithOwner(testCtx(t), "a")
	ctxB := dlock.WithOwner(testCtx(t), "b")
	held, err := m.Lock(ctxB)
	if err != nil {
		t.Fatal(err)
	}
	const holds = 3
	got := make(chan *dlock.Lease, holds)
	errs := make(chan error, holds)
	for i := 0; i < holds; i++ {
		go func() {
			l, err := m.Lock(ctxA)
			if err != nil {
				errs <- err
				return
			}
			got <- l
		}()
	}
	waitFor(t, 10*time.Second, func() bool {
		return srv.Client(t).ZCard(context.Background(), reentrantKey(name)+":q").Val() == 1 &&
			dlock.LineWaiters(c, reentrantKey(name)) == holds
	}, "every hold to wait")
	start := time.Now()
	if err := held.Unlock(ctxB); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < holds; i++ {
		select {
		case l := <-got:
			defer l.Unlock(ctxA)
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d holds granted %v after the release; the rest wait for a poll", i, holds, time.Since(start))
		}
	}
	if n, err := m.HoldCount(ctxA); err != nil || n != holds {
		t.Fatalf("HoldCount = %d, %v; want %d", n, err, holds)
	}
}

// HoldCount after Close says the Client is closed, as every other call
// does, rather than counting a hold whose lease Close ended.
func TestReentrantHoldCountAfterClose(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := dlock.WithOwner(testCtx(t), "a")
	m := c.ReentrantMutex(t.Name())
	if _, err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if n, err := m.HoldCount(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("HoldCount after Close = %d, %v; want ErrClosed", n, err)
	}
}

// A nested hold carries its owner's grant's token even once the fencing
// counter has expired under a long hold (renewals do not push it back; the
// server then reported 0, which no fence accepts).
func TestReentrantNestedHoldKeepsTheTokenAfterTheCounterExpired(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := dlock.WithOwner(testCtx(t), "a")
	m := c.ReentrantMutex(t.Name())
	outer, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Unlock(ctx)
	// What an hour of holding does: the counter's retention runs out.
	srv.Client(t).Del(ctx, reentrantKey(t.Name())+":fence")
	inner, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Unlock(ctx)
	if inner.Token() != outer.Token() || inner.Token() <= 0 {
		t.Errorf("nested hold's token %d, want the grant's %d", inner.Token(), outer.Token())
	}
}
