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

// lockWhenHeir starts a Lock of r on name and waits until it waits between
// attempts, where an Unlock of r may hand it the lock. The lease (or error)
// comes on the channel returned.
func lockWhenHeir(ctx context.Context, t *testing.T, r *dlock.Redlock, name string) <-chan leaseOrError {
	t.Helper()
	got := make(chan leaseOrError, 1)
	go func() {
		l, err := r.Mutex(name).Lock(ctx)
		got <- leaseOrError{l, err}
	}()
	waitFor(t, 10*time.Second, func() bool {
		_, head := dlock.RedlockGateState(r, name)
		return head == "waiting"
	}, "Lock waiting between attempts")
	return got
}

type leaseOrError struct {
	l   *dlock.Lease
	err error
}

func TestRedlockUnlockHandsOverLocally(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	// A long node timeout: every node must get its share of the first lock
	// (a dial, a handshake and a NOSCRIPT fallback on fresh nodes), which
	// took longer than the default 300 ms once on a loaded machine.
	r := newRedlock(t, addrsOf(servers), slowRetry, dlock.WithNodeTimeout(5*time.Second))
	ctx := testCtx(t)
	name := t.Name()
	held := tryLockOnEveryNode(ctx, t, r, servers, name)
	next := lockWhenHeir(ctx, t, r, name)
	published := commandCalls(t, servers[0], "publish")
	if err := held.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	got := <-next
	if got.err != nil {
		t.Fatalf("Lock: %v", got.err)
	}
	if n := commandCalls(t, servers[0], "publish") - published; n != 0 {
		t.Errorf("the hand-off published %d messages; want none (nothing was released)", n)
	}
	waitFor(t, 10*time.Second, func() bool {
		for _, v := range holdersOf(t, servers, lockKey(name)) {
			if v != dlock.LeaseOwner(got.l) {
				return false
			}
		}
		return true
	}, "every node to hold the new lease's owner")
	if err := held.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("a second Unlock of the lease handed over: got %v, want ErrNotHeld", err)
	}
	if err := got.l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the lease handed over: %v", err)
	}
	wantNoKey(t, servers, lockKey(name))
}

func TestRedlockLocalHandoffsAreBounded(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	r := newRedlock(t, addrsOf(servers))
	ctx := testCtx(t)
	name := t.Name()
	held := tryLockOnEveryNode(ctx, t, r, servers, name)
	published := commandCalls(t, servers[0], "publish")
	// Ten Unlocks, each with a Lock of the same Redlock waiting: seven
	// hand-offs, then one release on the nodes, then hand-offs again.
	for i := 0; i < 10; i++ {
		next := lockWhenHeir(ctx, t, r, name)
		if err := held.Unlock(ctx); err != nil {
			t.Fatalf("Unlock %d: %v", i+1, err)
		}
		got := <-next
		if got.err != nil {
			t.Fatalf("Lock %d: %v", i+1, got.err)
		}
		held = got.l
	}
	if n := commandCalls(t, servers[0], "publish") - published; n != 1 {
		t.Errorf("10 Unlocks with a local waiter published %d releases; want 1 (other processes get a chance after 7 hand-offs)", n)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wantNoKey(t, servers, lockKey(name))
}

func TestRedlockHandoffToALockThatGaveUp(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	proxies, addrs := proxied(t, servers)
	r := newRedlock(t, addrs, dlock.WithNodeTimeout(2*time.Second))
	ctx := testCtx(t)
	name := t.Name()
	held := tryLockOnEveryNode(ctx, t, r, servers, name)
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := lockWhenHeir(waitCtx, t, r, name)

	// The transfer's replies are held back while the waiter gives up.
	for _, p := range proxies {
		p.HoldReplies(true)
	}
	unlocked := make(chan error, 1)
	go func() { unlocked <- held.Unlock(ctx) }()
	waitFor(t, 10*time.Second, func() bool {
		_, head := dlock.RedlockGateState(r, name)
		return head == "taken"
	}, "hand-off in flight")
	cancel()
	waitFor(t, 10*time.Second, func() bool {
		_, head := dlock.RedlockGateState(r, name)
		return head == ""
	}, "waiter leaving")
	for _, p := range proxies {
		p.HoldReplies(false)
	}
	if err := <-unlocked; err != nil {
		t.Errorf("Unlock: %v", err)
	}
	if got := <-next; !errors.Is(got.err, dlock.ErrNotObtained) || !errors.Is(got.err, context.Canceled) {
		t.Errorf("Lock that gave up during a hand-off: got %v, %v; want ErrNotObtained and Canceled", got.l, got.err)
	}
	// It released what it was handed: nothing is left locked. (On a loaded
	// machine the replies can be held past the node timeout: the transfer
	// then fails, and what it moved without saying so is given back in the
	// background, a moment later.)
	waitFor(t, 10*time.Second, func() bool {
		for _, v := range holdersOf(t, servers, lockKey(name)) {
			if v != "" {
				return false
			}
		}
		return true
	}, "no node to hold the key")
	if _, err := r.Mutex(name).TryLock(ctx); err != nil {
		t.Errorf("TryLock after the abandoned hand-off: %v", err)
	}
}

func TestRedlockNextInLineWaitsForItsOwnProcess(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	asked := make(chan acquireReply, 256)
	r := newHookedRedlock(t, addrsOf(servers), asked, slowRetry)
	first := handOverTwice(testCtx(t), t, r, servers, t.Name())
	// Each Lock call asks the nodes as an owner of its own (a fresh one
	// only after an attempt that took shares, which none can here: the
	// lock is held on every node until it is handed over). Counting
	// owners, not scripts, leaves out what timing decides: how many times
	// the first waiter asked before its hand-off came, and whether the
	// TryLock's share on a node landed ahead of its first attempt.
	waiters := map[string]bool{}
	for len(asked) > 0 {
		if a := <-asked; a.owner != first {
			waiters[a.owner] = true
		}
	}
	if len(waiters) != 1 {
		t.Errorf("%d Lock calls asked the nodes for the lock; want 1, the first waiter (the second must not ask while its own process holds the lock, only wait for the hand-off)", len(waiters))
	}
}

// handOverTwice takes name with TryLock, lines two Lock calls up behind it,
// and unlocks each lease as soon as the next in line is first: two
// hand-offs, then a release. It returns the TryLock lease's owner.
func handOverTwice(ctx context.Context, t *testing.T, r *dlock.Redlock, servers []*redistest.Server, name string) (first string) {
	t.Helper()
	a := tryLockOnEveryNode(ctx, t, r, servers, name)
	b := lockWhenHeir(ctx, t, r, name)
	c := make(chan leaseOrError, 1)
	go func() {
		l, err := r.Mutex(name).Lock(ctx)
		c <- leaseOrError{l, err}
	}()
	waitFor(t, 10*time.Second, func() bool { n, _ := dlock.RedlockGateState(r, name); return n == 2 }, "second waiter in line")
	// Until the line's subscription is confirmed, whoever is first in it
	// asks the nodes rather than wait for a release it could miss.
	waitFor(t, 10*time.Second, func() bool { return dlock.RedlockGateHears(r, name) }, "the line hearing releases")
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	gotB := <-b
	if gotB.err != nil {
		t.Fatalf("first waiter: %v", gotB.err)
	}
	// The second waiter is now first in line while this process holds the
	// lock: it must not ask the nodes, only wait for the hand-off. Give it
	// time to (wrongly) ask before unlocking: the caller counts.
	waitFor(t, 10*time.Second, func() bool { n, _ := dlock.RedlockGateState(r, name); return n == 1 }, "second waiter first in line")
	time.Sleep(200 * time.Millisecond) // observing that nothing happens: no event to await
	if err := gotB.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	gotC := <-c
	if gotC.err != nil {
		t.Fatalf("second waiter: %v", gotC.err)
	}
	if err := gotC.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	return dlock.LeaseOwner(a)
}

// TestRedlockHandoffThatDidNotAnswer: a hand-off whose replies do not come
// within the node timeout fails, although the nodes ran it: they moved the
// key, and then the Unlock's own release finds no key of the lease's. That
// must not read as "expired or taken over": the key was the lease's until
// its own hand-off moved it.
func TestRedlockHandoffThatDidNotAnswer(t *testing.T) {
	t.Parallel()
	servers := redistest.StartNodes(t, 3)
	proxies, addrs := proxied(t, servers)
	// At most one idle connection per node: the one the transfer takes is
	// then the only one whose replies are held (with more, the release
	// after it could take another held one and fail as well).
	oneIdle := func(o *redis.Options) { o.MaxIdleConns = 1 }
	r := newRedlockOn(t, redlockNodeClients(t, addrs, oneIdle), slowRetry, dlock.WithNodeTimeout(time.Second))
	ctx := testCtx(t)
	// Load the scripts first: a NOSCRIPT reply would be held too.
	handOverTwice(ctx, t, r, servers, t.Name()+"-warm")

	name := t.Name()
	held := tryLockOnEveryNode(ctx, t, r, servers, name)
	next := lockWhenHeir(ctx, t, r, name)
	// Replies on the connections open now are held: the transfer's. The
	// release after it goes out on others, which answer.
	for _, p := range proxies {
		p.HoldOpenReplies(true)
	}
	err := held.Unlock(ctx)
	for _, p := range proxies {
		p.HoldOpenReplies(false)
	}
	if err != nil {
		t.Errorf("Unlock whose hand-off went unanswered: %v, want nil", err)
	}
	got := <-next // the heir takes the lock by an attempt of its own
	if got.err != nil {
		t.Fatalf("Lock after a hand-off that failed: %v", got.err)
	}
	if err := got.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// What the transfer moved without answering is given back in the
	// background, once its requests have returned: on a loaded machine
	// that can be after the heir took the lock from the other nodes.
	waitNoKey(t, servers, lockKey(name))
}
