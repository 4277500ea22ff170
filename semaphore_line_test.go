package dlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A Semaphore's acquisitions of every permit it was given wait in their
// Client's local line, as a Mutex's waiters do (mutex_wait_test.go); those
// of fewer permits keep a place each.

func semHolders(name string) string { return "dlock:{" + name + "}:sem" }

// semKeysLeft counts the semaphore's keys still there.
func semKeysLeft(ctx context.Context, t testing.TB, srv *redistest.Server, name string) int64 {
	k := semHolders(name)
	return srv.Client(t).Exists(ctx, k, k+":n", k+":q", k+":w").Val()
}

// Acquisitions of the one permit by one Client, waiting while another
// Client holds it, share one place in the queue: the first through Redis
// (one grant published), the others by local hand-offs in its turn, in
// arrival order and each with a fresh fencing token.
func TestSemaphoreHandsPermitsOverLocally(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	x, c := newClient(t, srv), newClient(t, srv)
	dlock.SetStandbyGrace(c, time.Minute)
	held, err := x.Semaphore(name, 1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	sub := srv.Client(t).Subscribe(ctx, semHolders(name))
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	s := c.Semaphore(name, 1)
	const waiters = 4
	type grant struct {
		waiter int
		token  int64
	}
	grants := make(chan grant, waiters)
	var wg sync.WaitGroup
	for i := 0; i < waiters; i++ {
		i := i
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := s.Acquire(ctx, 1)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			grants <- grant{i, p.Token()}
			if err := p.Release(ctx); err != nil {
				t.Errorf("waiter %d: Release: %v", i, err)
			}
		}()
		waitFor(t, 10*time.Second, func() bool { return dlock.LineWaiters(c, semHolders(name)) == i+1 }, "the acquisition to line up")
	}
	if n := srv.Client(t).ZCard(ctx, semHolders(name)+":q").Val(); n != 1 {
		t.Errorf("%d places queued in Redis for %d waiting acquisitions of one Client, want 1", n, waiters)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(grants)
	last, next := held.Token(), 0
	for g := range grants {
		if g.waiter != next {
			t.Errorf("grant %d went to waiter %d, want waiter %d (arrival order)", next+1, g.waiter, next)
		}
		if g.token <= last {
			t.Errorf("token %d after %d", g.token, last)
		}
		last, next = g.token, next+1
	}
	if published := messagesLeft(ctx, sub); published != 1 {
		t.Errorf("%d grants published for %d hand-offs, want 1 (the rest handed over locally)", published, waiters)
	}
	if n := semKeysLeft(ctx, t, srv, name); n != 0 {
		t.Errorf("%d keys left after every acquisition released", n)
	}
}

// A holder that gave some of its permits back (ReleaseN) no longer holds
// what the waiter behind it asks for: its Release goes through Redis, and
// the waiter gets its permits once they are free, never more than the
// limit in use.
func TestSemaphorePassesOnlyPermitsThatFit(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	x, c := newClient(t, srv), newClient(t, srv)
	dlock.SetStandbyGrace(c, time.Minute)
	held, err := x.Semaphore(name, 2).Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	s := c.Semaphore(name, 2)
	first := make(chan *dlock.Permits, 1)
	go func() {
		p, err := s.Acquire(ctx, 2)
		if err != nil {
			t.Errorf("first: %v", err)
			close(first)
			return
		}
		first <- p
	}()
	waitFor(t, 10*time.Second, func() bool { return dlock.LineWaiters(c, semHolders(name)) == 1 }, "the first acquisition to queue")
	second := make(chan *dlock.Permits, 1)
	go func() {
		p, err := s.Acquire(ctx, 2)
		if err != nil {
			t.Errorf("second: %v", err)
			close(second)
			return
		}
		second <- p
	}()
	waitFor(t, 10*time.Second, func() bool { return dlock.LineWaiters(c, semHolders(name)) == 2 }, "the second acquisition to line up")
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p, ok := <-first
	if !ok {
		t.FailNow()
	}
	if err := p.ReleaseN(ctx, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-second:
		t.Fatal("the second acquisition of 2 permits was served while the first still held 1")
	default:
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	q, ok := <-second
	if !ok {
		t.FailNow()
	}
	if q.Token() <= p.Token() {
		t.Errorf("second token %d after the first's %d", q.Token(), p.Token())
	}
	if n, err := s.Available(ctx); err != nil || n != 0 {
		t.Errorf("Available = %d, %v while the second holds both permits; want 0", n, err)
	}
	if err := q.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := semKeysLeft(ctx, t, srv, name); n != 0 {
		t.Errorf("%d keys left after every acquisition released", n)
	}
}
