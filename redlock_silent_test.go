package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A silent node: one of three Redlock nodes stops answering, frozen with
// SIGSTOP (connections stay open, nothing comes back) or killed (connections
// refused; go-redis retries a refused dial every 100 ms, five times, so a
// request to it fails after about 500 ms, or at its deadline). What the
// node is still owed goes on in the background; the calls return within
// their bounds, and the live quorum decides.

// silentNodeTimeout is the node timeout of these tests: long enough that
// the bounds below leave real slack under -race on a loaded machine (a
// call that waits for the silent node may take the timeout and up to half
// of it more, one that need not wait at most half of it).
const silentNodeTimeout = 600 * time.Millisecond

// silentFault is one way of silencing a node.
type silentFault struct {
	name    string
	silence func(s *redistest.Server)
}

var silentFaults = []silentFault{
	{"frozen", func(s *redistest.Server) { s.Pause() }}, // the harness resumes it at cleanup
	{"killed", func(s *redistest.Server) { s.Kill() }},
}

// TestRedlockTryLockWithASilentNode: another process holds the lock, and
// node 0 goes silent. The first TryLock to meet the silent node may wait
// for it up to the node timeout; once it has not answered, the live nodes,
// which say the lock is held, decide at once.
func TestRedlockTryLockWithASilentNode(t *testing.T) {
	for _, f := range silentFaults {
		f := f
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			servers := redistest.StartNodes(t, 3)
			addrs := addrsOf(servers)
			a := newRedlock(t, addrs, dlock.WithNodeTimeout(silentNodeTimeout))
			b := newRedlock(t, addrs, dlock.WithNodeTimeout(silentNodeTimeout))
			ctx := testCtx(t)
			name := t.Name()
			held := tryLockOnEveryNode(ctx, t, a, servers, name)
			defer func() { _ = held.Unlock(ctx) }()
			f.silence(servers[0])

			for i := 0; i < 4; i++ {
				start := time.Now()
				_, err := b.Mutex(name).TryLock(ctx)
				took := time.Since(start)
				if !errors.Is(err, dlock.ErrNotObtained) {
					t.Fatalf("TryLock %d: got %v, want ErrNotObtained", i, err)
				}
				limit := silentNodeTimeout / 2
				if i == 0 {
					limit = silentNodeTimeout + silentNodeTimeout/2
				}
				t.Logf("TryLock %d returned after %v", i, took.Round(time.Millisecond))
				if took > limit {
					t.Errorf("TryLock %d returned after %v, want at most %v (node timeout %v)", i, took, limit, silentNodeTimeout)
				}
			}
		})
	}
}

// TestRedlockAttemptsWaitWhenMostNodesAreSilent: when the nodes that answer
// are too few for a quorum, an attempt waits for the silent ones as for any
// other. Every node frozen for a while (as a client too loaded to hear any
// of them in time sees it) marks them all silent; once they answer again,
// the next TryLock takes the lock instead of failing at once on nodes it
// no longer waits for.
func TestRedlockAttemptsWaitWhenMostNodesAreSilent(t *testing.T) {
	t.Parallel()
	servers := redistest.StartNodes(t, 3)
	r := newRedlock(t, addrsOf(servers), dlock.WithNodeTimeout(silentNodeTimeout))
	ctx := testCtx(t)
	name := t.Name()
	for _, s := range servers {
		s.Pause()
	}
	if _, err := r.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrQuorum) {
		t.Fatalf("TryLock with every node frozen: got %v, want ErrQuorum", err)
	}
	for i := range servers {
		if !dlock.RedlockNodeSilent(r, i) {
			t.Fatalf("node %d, frozen, is not counted silent", i)
		}
	}
	for _, s := range servers {
		s.Resume()
	}
	// Another name: the frozen attempt's grants land now, and are given
	// back only once its requests have returned.
	l, err := r.Mutex(name + "-after").TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock once every node answers again: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
}

// TestRedlockLockWithASilentNodeReturnsAtItsDeadline: a Lock on a held
// lock with node 0 silent returns at its deadline, not after a give-back or
// a subscription that waits for the silent node. A give-back to the silent
// node is due at once when its request failed before the attempt stopped
// waiting: here, without go-redis's retries of a failed command, a killed
// node's request fails after the refused dials (the node timeout is longer
// than those), and a frozen node's at its client's read timeout, shorter
// than the node timeout. With go-redis's defaults, the request fails at the
// node timeout, when the attempt stops waiting, and either can come first.
func TestRedlockLockWithASilentNodeReturnsAtItsDeadline(t *testing.T) {
	const nodeTimeout = 600 * time.Millisecond
	noRetries := func(o *redis.Options) { o.MaxRetries = -1 }
	shortReads := func(o *redis.Options) { o.MaxRetries, o.ReadTimeout = -1, 350*time.Millisecond }
	for _, tc := range []struct {
		name      string
		fault     silentFault
		configure func(*redis.Options)
		deadline  time.Duration
	}{
		{"frozen", silentFaults[0], nil, 800 * time.Millisecond},
		{"frozen, reads time out first", silentFaults[0], shortReads, 400 * time.Millisecond},
		{"killed", silentFaults[1], nil, 700 * time.Millisecond},
		{"killed, no retries", silentFaults[1], noRetries, 700 * time.Millisecond},
	} {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			servers := redistest.StartNodes(t, 3)
			addrs := addrsOf(servers)
			a := newRedlock(t, addrs, dlock.WithNodeTimeout(nodeTimeout))
			b := newRedlockOn(t, redlockNodeClients(t, addrs, tc.configure), dlock.WithNodeTimeout(nodeTimeout))
			ctx := testCtx(t)
			name := t.Name()
			held := tryLockOnEveryNode(ctx, t, a, servers, name)
			defer func() { _ = held.Unlock(ctx) }()
			tc.fault.silence(servers[0])

			wait, cancel := context.WithTimeout(ctx, tc.deadline)
			defer cancel()
			start := time.Now()
			_, err := b.Mutex(name).Lock(wait)
			took := time.Since(start)
			if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Lock: got %v, want ErrNotObtained and DeadlineExceeded", err)
			}
			t.Logf("Lock with a deadline of %v returned after %v", tc.deadline, took.Round(time.Millisecond))
			if slack := 200 * time.Millisecond; took > tc.deadline+slack {
				t.Errorf("Lock with a deadline of %v returned after %v, want at most %v later", tc.deadline, took, slack)
			}
		})
	}
}

// TestRedlockWaiterServedWithASilentNode: another process waits for the
// lock; node 0 goes silent, and the holder unlocks once the waiter listens
// on the live nodes. Their release wakes the waiter, which takes the lock
// on the live quorum at once: well within the node timeout, which only
// the silent node's share of the work may take.
func TestRedlockWaiterServedWithASilentNode(t *testing.T) {
	for _, f := range silentFaults {
		f := f
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			servers := redistest.StartNodes(t, 3)
			addrs := addrsOf(servers)
			a := newRedlock(t, addrs, dlock.WithNodeTimeout(silentNodeTimeout))
			b := newRedlock(t, addrs, dlock.WithNodeTimeout(silentNodeTimeout), slowRetry)
			ctx := testCtx(t)
			name := t.Name()
			held := tryLockOnEveryNode(ctx, t, a, servers, name)
			f.silence(servers[0])

			type served struct {
				leaseOrError
				at time.Time
			}
			got := make(chan served, 1)
			go func() {
				l, err := b.Mutex(name).Lock(ctx)
				got <- served{leaseOrError{l, err}, time.Now()}
			}()
			waitListening(t, servers[1:], name)
			released := time.Now()
			if err := held.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
			unlocked := time.Since(released)
			w := <-got
			if w.err != nil {
				t.Fatalf("the waiter's Lock: %v", w.err)
			}
			defer func() {
				if err := w.l.Unlock(ctx); err != nil {
					t.Errorf("the waiter's Unlock: %v", err)
				}
			}()
			wait := w.at.Sub(released)
			t.Logf("Unlock took %v; the waiter was served %v after it began", unlocked.Round(time.Millisecond), wait.Round(time.Millisecond))
			if limit := silentNodeTimeout + silentNodeTimeout/2; unlocked > limit {
				t.Errorf("Unlock took %v, want at most %v (node timeout %v)", unlocked, limit, silentNodeTimeout)
			}
			if limit := silentNodeTimeout / 2; wait > limit {
				t.Errorf("the waiter was served %v after the Unlock began, want at most %v (node timeout %v)", wait, limit, silentNodeTimeout)
			}
		})
	}
}

// TestRedlockUnlockWithASilentNode: with node 0 silent, a lease taken on
// the live quorum is released there, and Unlock returns once they have
// answered: the release owed to the silent node follows in the background,
// after the acquisition's own request to it has returned. The lock is
// free at once for another process, and a waiter of the same Redlock is
// handed it just as fast.
func TestRedlockUnlockWithASilentNode(t *testing.T) {
	for _, f := range silentFaults {
		f := f
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			servers := redistest.StartNodes(t, 3)
			addrs := addrsOf(servers)
			a := newRedlock(t, addrs, dlock.WithNodeTimeout(silentNodeTimeout))
			b := newRedlock(t, addrs, dlock.WithNodeTimeout(silentNodeTimeout))
			ctx := testCtx(t)
			name := t.Name()
			f.silence(servers[0])
			limit := silentNodeTimeout / 2

			// The first Unlock waits for the acquisition's request to node
			// 0, not yet known silent, up to the node timeout; then the
			// node counts silent, and is not waited for.
			for i := 0; i < 3; i++ {
				l, err := a.Mutex(name).TryLock(ctx)
				if err != nil {
					t.Fatalf("TryLock %d on the live quorum: %v", i, err)
				}
				start := time.Now()
				err = l.Unlock(ctx)
				took := time.Since(start)
				if err != nil {
					t.Fatalf("Unlock %d: %v", i, err)
				}
				t.Logf("Unlock %d took %v", i, took.Round(time.Millisecond))
				want := limit
				if i == 0 {
					want = silentNodeTimeout + limit
				}
				if took > want {
					t.Errorf("Unlock %d took %v, want at most %v (node timeout %v)", i, took, want, silentNodeTimeout)
				}
				lb, err := b.Mutex(name).TryLock(ctx)
				if err != nil {
					t.Fatalf("another process's TryLock right after Unlock %d: %v", i, err)
				}
				if err := lb.Unlock(ctx); err != nil {
					t.Fatalf("its Unlock: %v", err)
				}
			}

			// A waiter of the same Redlock: the Unlock hands the lock over.
			// Until node 0 counts silent (a request above has failed
			// there), the waiter's attempts would still wait for it.
			waitFor(t, 10*time.Second, func() bool { return dlock.RedlockNodeSilent(a, 0) }, "node 0 counted silent")
			l, err := a.Mutex(name).TryLock(ctx)
			if err != nil {
				t.Fatalf("TryLock before the hand-off: %v", err)
			}
			next := lockWhenHeir(ctx, t, a, name)
			// Measured from when the waiter listens on the live nodes: its
			// own first subscription is not the hand-off's.
			waitFor(t, 10*time.Second, func() bool { return dlock.RedlockGateHears(a, name) }, "the waiter listening")
			start := time.Now()
			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock handing over: %v", err)
			}
			got := <-next
			handed := time.Since(start)
			if got.err != nil {
				t.Fatalf("the waiter's Lock: %v", got.err)
			}
			t.Logf("hand-off took %v", handed.Round(time.Millisecond))
			if handed > limit {
				t.Errorf("the waiter of the same Redlock got the lock %v after the Unlock began, want at most %v", handed, limit)
			}
			if err := got.l.Unlock(ctx); err != nil {
				t.Errorf("the waiter's Unlock: %v", err)
			}
		})
	}
}
