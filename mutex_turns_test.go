package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestProcessesTakeTurns: with many goroutines waiting in each of two
// clients, the lock alternates between the clients in turns: a grant
// through Redis, then at most MaxLocalHandoffs local hand-offs, and the
// fencing tokens increase in grant order. That holds for the first turn
// too, although the holder's client also has the first place in Redis: the
// holder took the lock without queueing, so its Unlock goes through the
// queue. A turn's last Unlock and its client's next queue entry reach Redis
// in either order (docs/waiting.md, "A process's turn"), so a client whose
// next entry arrives first, while the other's is delayed, may take two
// turns in a row: the bound is on local hand-offs, told apart by the
// acquire's attempts (a local hand-off asks Redis nothing).
func TestProcessesTakeTurns(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	rec := &recorder{}
	a, b := newClient(t, srv, dlock.WithObserver(rec)), newClient(t, srv, dlock.WithObserver(rec))
	held := mustLock(t, a, name)

	const perClient = 2*dlock.MaxLocalHandoffs + 4
	type grant struct {
		label string
		token int64
	}
	var mu sync.Mutex
	var order []grant
	var wg sync.WaitGroup
	start := func(c *dlock.Client, label string, n int) {
		for i := 0; i < n; i++ {
			lockThen(ctx, t, &wg, c, name, func(l *dlock.Lease) {
				mu.Lock()
				order = append(order, grant{label, l.Token()})
				mu.Unlock()
			})
		}
	}
	start(a, "a", perClient)
	waitQueued(t, srv, name, 1)
	start(b, "b", perClient)
	waitQueued(t, srv, name, 2)
	waitFor(t, 10*time.Second, func() bool {
		return dlock.LocalWaiters(a, name) == perClient && dlock.LocalWaiters(b, name) == perClient
	}, "every goroutine to line up")
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	attempts := map[int64]int{}
	for _, o := range rec.snapshot().outcomes {
		if o.Err == nil {
			attempts[o.Token] = o.Attempts
		}
	}
	labels := make([]string, len(order))
	local, turns := 0, 0
	for i, g := range order {
		labels[i] = g.label
		if i > 0 && g.token <= order[i-1].token {
			t.Errorf("grant %d got token %d after %d", i, g.token, order[i-1].token)
		}
		if i == 0 || g.label != order[i-1].label {
			turns++
		}
		if i > 0 && g.label == order[i-1].label && attempts[g.token] == 0 {
			local++
		} else {
			local = 0 // a grant through Redis begins a turn
		}
		if local > dlock.MaxLocalHandoffs {
			t.Fatalf("grant order %v: %d local hand-offs in a row, want at most %d", labels[:i+1], local, dlock.MaxLocalHandoffs)
		}
	}
	if turns < 3 {
		t.Errorf("grant order %v: the clients took %d turns, want them to alternate", labels, turns)
	}
}

// TestTurnServesItsFirstWaiterLocally: once a Client's head is granted
// the lock through Redis, the Client's turn serves its other waiters, the
// first included, by local hand-offs in arrival order, with nobody of it
// queued in Redis meanwhile. A first waiter queued in Redis as the turn
// began would sit the turn out and come last (A, C, B), through a second
// published grant.
func TestTurnServesItsFirstWaiterLocally(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	x, c := newClient(t, srv), newClient(t, srv)
	// A machine stall in the turn must not make B queue in Redis by itself.
	dlock.SetStandbyGrace(c, time.Minute)
	held := mustLock(t, x, name)

	sub := srv.Client(t).Subscribe(ctx, lockKey(name))
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var order []string
	queuedInTurn := int64(-1)
	var wg sync.WaitGroup
	for i, label := range []string{"A", "B", "C"} {
		label := label
		lockThen(ctx, t, &wg, c, name, func(*dlock.Lease) {
			mu.Lock()
			order = append(order, label)
			mu.Unlock()
			if label == "A" {
				// B and C stand by, in this Client's queue only.
				queuedInTurn = srv.Client(t).ZCard(ctx, lockKey(name)+":q").Val()
			}
		})
		if i == 0 {
			waitQueued(t, srv, name, 1)
		}
		waitFor(t, 10*time.Second, func() bool { return dlock.LocalWaiters(c, name) == i+1 }, "the goroutine to line up")
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got := strings.Join(order, " "); got != "A B C" {
		t.Errorf("grant order %s, want A B C", got)
	}
	if queuedInTurn != 0 {
		t.Errorf("%d owners queued in Redis while the Client's turn served its waiters, want 0", queuedInTurn)
	}
	published := messagesLeft(ctx, sub)
	if published != 1 {
		t.Errorf("%d grants published, want 1 (to A; B and C served locally)", published)
	}
	if n := lockKeysLeft(ctx, t, srv, name); n != 0 {
		t.Errorf("%d keys left after every waiter unlocked", n)
	}
}

// TestTurnWithoutUnlockPassesTheLockOn: a Client's turn whose holder never
// unlocks (its lease expires) still ends: the waiter standing by for a
// local hand-off queues in Redis after the standby grace, and takes the
// lock once the holder's key expires.
func TestTurnWithoutUnlockPassesTheLockOn(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	x, c := newClient(t, srv), newClient(t, srv)
	held := mustLock(t, x, name)
	opts := []dlock.Option{dlock.WithTTL(500 * time.Millisecond), dlock.WithAutoRenew(false)}

	first, second := beginTurn(ctx, t, srv, c, held, name, true, opts...)
	if first == nil {
		return
	}
	// first never unlocks: its lease expires.
	select {
	case err := <-second:
		if err != nil {
			t.Fatalf("second Lock and Unlock: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the second waiter never got the lock that the first holder let expire")
	}
}

// TestFailedHandOffEndsTheTurn: a local hand-off that fails in the middle
// of a Client's turn (the holder's key is gone) ends the turn at once: a
// waiter that stood by queues in Redis, and every waiter gets the lock,
// although a turn nobody ends would keep them standing by for a minute here.
func TestFailedHandOffEndsTheTurn(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	x, c := newClient(t, srv), newClient(t, srv)
	dlock.SetStandbyGrace(c, time.Minute)
	held := mustLock(t, x, name)

	unlocked := make(chan error, 1)
	go func() {
		l, err := c.Mutex(name).Lock(ctx)
		if err != nil {
			t.Errorf("first Lock: %v", err)
			unlocked <- nil
			return
		}
		srv.Client(t).Del(ctx, lockKey(name)) // the holder's key is gone
		unlocked <- l.Unlock(ctx)
	}()
	waitHeads(t, srv, c, name)
	var wg sync.WaitGroup
	for i := 2; i <= 3; i++ {
		lockThen(ctx, t, &wg, c, name, func(*dlock.Lease) {})
		waitFor(t, 10*time.Second, func() bool { return dlock.LocalWaiters(c, name) == i }, "the goroutine to line up")
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-unlocked; !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock of a lock whose key is gone: %v, want ErrNotHeld", err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the waiters behind a failed hand-off still wait")
	}
	if n := lockKeysLeft(ctx, t, srv, name); n != 0 {
		t.Errorf("%d keys left after every waiter unlocked", n)
	}
}

// beginTurn lines up two goroutines of c on name, which held (a lease of
// another Client) holds, releases held, and returns once the first of them
// holds the lock through Redis, which begins c's turn: the second then
// stands by for a local hand-off. The first's lease is returned (nil when
// its Lock failed, reported on t); second receives the second's Lock error,
// after it unlocked when unlock is set.
func beginTurn(ctx context.Context, t *testing.T, srv *redistest.Server, c *dlock.Client, held *dlock.Lease, name string, unlock bool, opts ...dlock.Option) (first *dlock.Lease, second <-chan error) {
	t.Helper()
	firstc, secondc := make(chan *dlock.Lease, 1), make(chan error, 1)
	go func() {
		l, err := c.Mutex(name, opts...).Lock(ctx)
		if err != nil {
			t.Errorf("first Lock: %v", err)
		}
		firstc <- l
	}()
	waitHeads(t, srv, c, name)
	go func() {
		l, err := c.Mutex(name, opts...).Lock(ctx)
		if err == nil && unlock {
			err = l.Unlock(ctx)
		}
		secondc <- err
	}()
	waitFor(t, 10*time.Second, func() bool { return dlock.LocalWaiters(c, name) == 2 }, "the second goroutine to line up")
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	return <-firstc, secondc
}

// waitHeads waits until the one goroutine of c waiting for name is queued
// in Redis and heads c's local line. Its first attempt queues it before it
// takes its place in the line: a goroutine started in between would find
// the line empty, make its own attempt and could become the head.
func waitHeads(t *testing.T, srv *redistest.Server, c *dlock.Client, name string) {
	t.Helper()
	waitQueued(t, srv, name, 1)
	waitFor(t, 10*time.Second, func() bool { return dlock.LocalWaiters(c, name) == 1 }, "the first goroutine to head the line")
}
