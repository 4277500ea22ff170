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

// A Lock whose own process's Unlock is handing it the lock when its
// deadline comes returns at the deadline, not when the hand-off ends: the
// transfer's replies are held for seconds here. It must not wait for the
// transfer, nor for the release of what it delivered, whether it is leaving
// (waiting) or a wake-up brought it back to the top of its loop (woken).
// What the hand-off delivers after the Lock
// returned is released: no node keeps the key, a Lock waiting behind the
// one that gave up gets the lock (successor), and so does another Redlock.
func TestRedlockLockReturnsAtItsDeadlineDuringALocalHandoff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		wake, successor bool
	}{
		{name: "waiting"},
		{name: "woken", wake: true},
		{name: "successor", successor: true},
	} {
		t.Run(tc.name, func(t *testing.T) { testLockDeadlineDuringHandoff(t, tc.name, tc.wake, tc.successor) })
	}
}

func testLockDeadlineDuringHandoff(t *testing.T, name string, wake, successor bool) {
	const (
		patience = 2 * time.Second        // the Lock's deadline, from its start
		held     = 2 * time.Second        // the transfer's replies are held until this long after the deadline, or the Lock returns
		late     = 400 * time.Millisecond // how late the Lock may return: scheduling on a loaded machine
	)
	servers := redistest.StartNodes(t, 3)
	proxies, addrs := proxied(t, servers)
	replies := make(chan acquireReply, 256)
	// A node timeout longer than the replies are held: the transfer
	// succeeds, and delivers a lock to the Lock that gave up.
	r := newHookedRedlock(t, addrs, replies, slowRetry, dlock.WithNodeTimeout(5*time.Second))
	ctx := testCtx(t)
	name = "handoff-deadline-" + name
	// Load the scripts (a NOSCRIPT reply, held, would run nothing).
	handOverTwice(ctx, t, r, servers, name+"-warm")

	holder := tryLockOnEveryNode(ctx, t, r, servers, name)

	deadline := time.Now().Add(patience)
	lockCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	got := make(chan lockOutcome, 1)
	go func() {
		l, err := r.Mutex(name).Lock(lockCtx)
		got <- lockOutcome{l, err, time.Now()}
	}()
	waitIdleBetweenAttempts(ctx, t, replies, got, lockKey(name), dlock.LeaseOwner(holder), len(servers))
	var next <-chan leaseOrError
	if successor {
		next = startRedlockLock(ctx, r, name)
		waitFor(t, 10*time.Second, func() bool { n, _ := dlock.RedlockGateState(r, name); return n == 2 }, "second Lock in line")
	}

	if left := time.Until(deadline); left < patience/4 {
		t.Skipf("the Lock waited only %v before its deadline: too slow a machine to tell", left.Round(time.Millisecond))
	}

	// Hold the replies of two nodes of three: the transfer cannot reach a
	// quorum until they come.
	hold := func(on bool) {
		for _, p := range proxies[:2] {
			p.HoldReplies(on)
		}
	}
	hold(true)
	defer hold(false)
	unlocked := make(chan error, 1)
	go func() { unlocked <- holder.Unlock(ctx) }()
	var head string
	waitFor(t, 10*time.Second, func() bool {
		var n int
		n, head = dlock.RedlockGateState(r, name)
		return head == "taken" || n == 0
	}, "hand-off in flight")
	if head != "taken" {
		t.Skip("the Lock's deadline came before the Unlock began to hand it over: too slow a machine to tell")
	}
	if wake {
		// A message on the lock's channel through the node that answers
		// wakes the Lock, which then finds the hand-off under way.
		servers[2].Do(t, "PUBLISH", lockKey(name), "wake up")
	}
	var res lockOutcome
	select {
	case res = <-got:
	case <-time.After(time.Until(deadline) + held):
	}
	hold(false)
	if res.at.IsZero() {
		res = <-got
	}
	checkGaveUpAtDeadline(ctx, t, res, deadline, late)
	if err := <-unlocked; err != nil {
		t.Errorf("Unlock that handed the lock over: %v", err)
	}
	if successor {
		checkNextGranted(ctx, t, next)
	}
	checkAbandonedHandoffFreed(ctx, t, servers, name)
}

// checkGaveUpAtDeadline checks that a Lock whose deadline came while the
// lock was being handed to it returned within late of the deadline, not
// obtained; a lease it returned all the same is unlocked.
func checkGaveUpAtDeadline(ctx context.Context, t *testing.T, res lockOutcome, deadline time.Time, late time.Duration) {
	t.Helper()
	if res.l != nil {
		if err := res.l.Unlock(ctx); err != nil {
			t.Errorf("Unlock of the lease the Lock returned: %v", err)
		}
	}
	if d := res.at.Sub(deadline); d > late {
		t.Errorf("Lock returned %v after its deadline, while the hand-off to it was in flight; want within %v", d.Round(time.Millisecond), late)
	}
	if !errors.Is(res.err, dlock.ErrNotObtained) || !errors.Is(res.err, context.DeadlineExceeded) {
		t.Errorf("Lock whose deadline came during a hand-off: got a lease %t, error %v; want ErrNotObtained and DeadlineExceeded", res.l != nil, res.err)
	}
}

// checkNextGranted checks that the Lock in line behind the one that gave
// up gets the lock, and unlocks it.
func checkNextGranted(ctx context.Context, t *testing.T, next <-chan leaseOrError) {
	t.Helper()
	select {
	case got := <-next:
		if got.err != nil {
			t.Fatalf("the Lock behind the one that gave up: %v", got.err)
		}
		if err := got.l.Unlock(ctx); err != nil {
			t.Errorf("Unlock of the lock behind: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the Lock behind the one that gave up did not get the lock within 15s")
	}
}

// lockOutcome is what a Lock returned, and when.
type lockOutcome struct {
	l   *dlock.Lease
	err error
	at  time.Time
}

// waitIdleBetweenAttempts returns once each of nodes has answered two
// attempts on key by owners other than holder (before and after the Lock
// subscribed): the Lock then waits between attempts, sending nothing. It
// skips t when the Lock returns on got first.
func waitIdleBetweenAttempts(ctx context.Context, t *testing.T, replies <-chan acquireReply, got <-chan lockOutcome, key, holder string, nodes int) {
	answered := make([]int, nodes)
	for idle := false; !idle; {
		select {
		case rep := <-replies:
			if rep.key == key && rep.owner != holder {
				answered[rep.node]++
			}
			idle = true
			for _, n := range answered {
				idle = idle && n >= 2
			}
		case res := <-got:
			if res.l != nil {
				_ = res.l.Unlock(ctx)
			}
			t.Skipf("the Lock returned (%v) before it waited: too slow a machine to tell", res.err)
		case <-time.After(10 * time.Second):
			t.Fatalf("the Lock's attempts were not answered by every node within 10s: %v", answered)
		}
	}
}

// checkAbandonedHandoffFreed fails t unless what a hand-off delivered to a
// Lock that gave up is released: the keys go from every node, and another
// Redlock takes the lock.
func checkAbandonedHandoffFreed(ctx context.Context, t *testing.T, servers []*redistest.Server, name string) {
	limit := time.Now().Add(10 * time.Second)
	for {
		left := ""
		for i, v := range holdersOf(t, servers, lockKey(name)) {
			if v != "" {
				left = fmt.Sprintf("node %d still holds the key: %q", i, v)
			}
		}
		if left == "" {
			break
		}
		if time.Now().After(limit) {
			t.Fatalf("10s after the hand-off to a Lock that gave up: %s", left)
		}
		time.Sleep(10 * time.Millisecond) // polling the servers' state
	}
	octx, ocancel := context.WithTimeout(ctx, 10*time.Second)
	defer ocancel()
	other, err := newRedlock(t, addrsOf(servers)).Mutex(name).Lock(octx)
	if err != nil {
		t.Fatalf("another Redlock's Lock after the abandoned hand-off: %v", err)
	}
	if err := other.Unlock(ctx); err != nil {
		t.Errorf("another Redlock's Unlock: %v", err)
	}
}
