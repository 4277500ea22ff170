package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// The holds of a Client's owners wait for a ReentrantMutex in the
// Client's local line, as a Mutex's waiters do (mutex_wait_test.go).

// reentrantGrant is one hold granted to a waiting owner.
type reentrantGrant struct {
	owner string
	token int64
}

// lockOwnerThen locks m for owner in a goroutine, reports the grant on
// grants, then waits for release before it unlocks.
func lockOwnerThen(ctx context.Context, t *testing.T, wg *sync.WaitGroup, m *dlock.ReentrantMutex, owner string, grants chan<- reentrantGrant, release <-chan struct{}) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		octx := dlock.WithOwner(ctx, owner)
		l, err := m.Lock(octx)
		if err != nil {
			t.Errorf("Lock for %s: %v", owner, err)
			return
		}
		grants <- reentrantGrant{owner, l.Token()}
		if release != nil {
			<-release
		}
		if err := l.Unlock(octx); err != nil {
			t.Errorf("Unlock for %s: %v", owner, err)
		}
	}()
}

// reentrantKeysLeft counts the lock's keys still there (lock, queue, holds).
func reentrantKeysLeft(ctx context.Context, t testing.TB, srv *redistest.Server, name string) int64 {
	k := reentrantKey(name)
	return srv.Client(t).Exists(ctx, k, k+":q", k+":holds").Val()
}

// Holds of different owners of one Client, waiting while another Client
// holds the lock, share one place in its queue: the first through Redis
// (one grant published), the others by local hand-offs in its turn, in
// arrival order and each with a fresh fencing token.
func TestReentrantUnlockHandsOverLocally(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	x, c := newClient(t, srv), newClient(t, srv)
	// A machine stall in the turn must not make a waiter queue in Redis by itself.
	dlock.SetStandbyGrace(c, time.Minute)
	held, err := x.ReentrantMutex(name).Lock(dlock.WithOwner(ctx, "x"))
	if err != nil {
		t.Fatal(err)
	}
	sub := srv.Client(t).Subscribe(ctx, reentrantKey(name))
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}

	m := c.ReentrantMutex(name)
	const waiters = 4
	grants := make(chan reentrantGrant, waiters)
	var wg sync.WaitGroup
	for i := 0; i < waiters; i++ {
		lockOwnerThen(ctx, t, &wg, m, fmt.Sprint("o", i), grants, nil)
		waitFor(t, 10*time.Second, func() bool { return dlock.LineWaiters(c, reentrantKey(name)) == i+1 }, "the hold to line up")
	}
	if n := srv.Client(t).ZCard(ctx, reentrantKey(name)+":q").Val(); n != 1 {
		t.Errorf("%d places queued in Redis for %d waiting holds of one Client, want 1", n, waiters)
	}
	if err := held.Unlock(dlock.WithOwner(ctx, "x")); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(grants)
	last, next := held.Token(), 0
	for g := range grants {
		if want := fmt.Sprint("o", next); g.owner != want {
			t.Errorf("grant %d went to %s, want %s (arrival order)", next+1, g.owner, want)
		}
		if g.token <= last {
			t.Errorf("token %d after %d", g.token, last)
		}
		last, next = g.token, next+1
	}
	if published := messagesLeft(ctx, sub); published != 1 {
		t.Errorf("%d grants published for %d hand-offs, want 1 (the rest handed over locally)", published, waiters)
	}
	if n := reentrantKeysLeft(ctx, t, srv, name); n != 0 {
		t.Errorf("%d keys left after every hold was unlocked", n)
	}
}

// An owner that holds the lock adds a hold at once while other owners of
// its Client wait in the line, and the lock passes on locally only with
// the owner's last hold: the waiter behind never shares the lock with it.
func TestReentrantNestedHoldSkipsTheLine(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	x, c := newClient(t, srv), newClient(t, srv)
	dlock.SetStandbyGrace(c, time.Minute)
	held, err := x.ReentrantMutex(name).Lock(dlock.WithOwner(ctx, "x"))
	if err != nil {
		t.Fatal(err)
	}
	m := c.ReentrantMutex(name)
	ctxA := dlock.WithOwner(ctx, "a")
	grantsA := make(chan *dlock.Lease, 1)
	go func() {
		l, err := m.Lock(ctxA)
		if err != nil {
			t.Errorf("Lock for a: %v", err)
			close(grantsA)
			return
		}
		grantsA <- l
	}()
	waitFor(t, 10*time.Second, func() bool { return dlock.LineWaiters(c, reentrantKey(name)) == 1 }, "a to queue")
	grants := make(chan reentrantGrant, 1)
	var wg sync.WaitGroup
	lockOwnerThen(ctx, t, &wg, m, "b", grants, nil)
	waitFor(t, 10*time.Second, func() bool { return dlock.LineWaiters(c, reentrantKey(name)) == 2 }, "b to line up")

	if err := held.Unlock(dlock.WithOwner(ctx, "x")); err != nil {
		t.Fatal(err)
	}
	outer, ok := <-grantsA
	if !ok {
		t.FailNow()
	}
	// b stands by for a local hand-off; a nests past it.
	inner, err := m.Lock(ctxA)
	if err != nil {
		t.Fatalf("nested Lock while another owner waits in the line: %v", err)
	}
	if inner.Token() != outer.Token() {
		t.Errorf("nested hold's token %d, want the grant's %d", inner.Token(), outer.Token())
	}
	if err := outer.Unlock(ctxA); err != nil {
		t.Fatal(err)
	}
	if n := holdCount(t, m, ctxA); n != 1 {
		t.Errorf("a holds %d holds after unlocking one of two, want 1", n)
	}
	select {
	case g := <-grants:
		t.Fatalf("%s granted while a still holds the lock", g.owner)
	default:
	}
	if err := inner.Unlock(ctxA); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if g := <-grants; g.token <= outer.Token() {
		t.Errorf("b's token %d after a's %d", g.token, outer.Token())
	}
	if n := reentrantKeysLeft(ctx, t, srv, name); n != 0 {
		t.Errorf("%d keys left after every hold was unlocked", n)
	}
}

// A hold that gives up as the head of the line gives its own place up in
// Redis (it is its owner's, so it cannot pass on); the next hold queues
// under its own owner and gets the lock, and nothing is left behind.
func TestReentrantHeadThatGivesUpLeavesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	x, c := newClient(t, srv), newClient(t, srv)
	held, err := x.ReentrantMutex(name).Lock(dlock.WithOwner(ctx, "x"))
	if err != nil {
		t.Fatal(err)
	}
	m := c.ReentrantMutex(name)
	headCtx, cancel := context.WithCancel(dlock.WithOwner(ctx, "a"))
	gaveUp := make(chan error, 1)
	go func() {
		_, err := m.Lock(headCtx)
		gaveUp <- err
	}()
	waitFor(t, 10*time.Second, func() bool { return dlock.LineWaiters(c, reentrantKey(name)) == 1 }, "a to queue")
	grants := make(chan reentrantGrant, 1)
	var wg sync.WaitGroup
	lockOwnerThen(ctx, t, &wg, m, "b", grants, nil)
	waitFor(t, 10*time.Second, func() bool { return dlock.LineWaiters(c, reentrantKey(name)) == 2 }, "b to line up")
	cancel()
	if err := <-gaveUp; !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock whose ctx ended: %v, want ErrNotObtained and context.Canceled", err)
	}
	// b takes the head's turn: its own place replaces a's.
	waitFor(t, 10*time.Second, func() bool {
		q, err := srv.Client(t).ZRange(ctx, reentrantKey(name)+":q", 0, -1).Result()
		return err == nil && len(q) == 1 && placeOwner(q[0], "b") != ""
	}, "b to queue in a's stead")
	if err := held.Unlock(dlock.WithOwner(ctx, "x")); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if g := <-grants; g.token <= held.Token() {
		t.Errorf("b's token %d after x's %d", g.token, held.Token())
	}
	if n := reentrantKeysLeft(ctx, t, srv, name); n != 0 {
		t.Errorf("%d keys left after every hold was unlocked or gave up", n)
	}
}

// placeOwner returns member's owner value when its owner identity is id
// (the value is the Client's instance, ":", id, then ";" and the owner
// info, if any), else "".
func placeOwner(member, id string) string {
	if len(member) <= 32 {
		return ""
	}
	owner := member[32:]
	if strings.HasSuffix(owner, ":"+id) || strings.Contains(owner, ":"+id+";") {
		return owner
	}
	return ""
}
