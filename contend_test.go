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

// TestWaitersOfOneClientShareOneQueueEntry: however many goroutines of one
// Client wait, the lock's queue in Redis holds one entry for the Client,
// and every goroutine still gets the lock, one at a time.
func TestWaitersOfOneClientShareOneQueueEntry(t *testing.T) {
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	holder := newClient(t, srv)
	held := mustLock(t, holder, name)
	a, b := newClient(t, srv), newClient(t, srv)

	const perClient = 25
	var mu sync.Mutex
	holders := 0
	var wg sync.WaitGroup
	for _, c := range []*dlock.Client{a, b} {
		for i := 0; i < perClient; i++ {
			wg.Add(1)
			go func(c *dlock.Client) {
				defer wg.Done()
				l, err := c.Mutex(name).Lock(ctx)
				if err != nil {
					t.Errorf("Lock: %v", err)
					return
				}
				mu.Lock()
				holders++
				if holders != 1 {
					t.Errorf("%d holders at once", holders)
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				holders--
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("Unlock: %v", err)
				}
			}(c)
		}
	}
	waitFor(t, 10*time.Second, func() bool {
		return dlock.LocalWaiters(a, name) == perClient && dlock.LocalWaiters(b, name) == perClient
	}, "every goroutine to line up")
	if n := srv.Client(t).ZCard(ctx, lockKey(name)+":q").Val(); n != 2 {
		t.Fatalf("%d queue entries for %d goroutines of 2 clients, want 2", n, 2*perClient)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if n := srv.Client(t).Exists(ctx, lockKey(name), lockKey(name)+":q").Val(); n != 0 {
		t.Errorf("%d keys left after every waiter unlocked", n)
	}
}

// TestProcessesTakeTurns: with many goroutines waiting in each of two
// clients, grants alternate between the clients.
func TestProcessesTakeTurns(t *testing.T) {
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	a, b := newClient(t, srv), newClient(t, srv)
	held := mustLock(t, a, name)

	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	start := func(c *dlock.Client, label string, n int) {
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := c.Mutex(name).Lock(ctx)
				if err != nil {
					t.Errorf("Lock: %v", err)
					return
				}
				mu.Lock()
				order = append(order, label)
				mu.Unlock()
				_ = l.Unlock(ctx)
			}()
		}
	}
	start(a, "a", 6)
	waitQueued(t, srv, name, 1)
	start(b, "b", 6)
	waitQueued(t, srv, name, 2)
	waitFor(t, 10*time.Second, func() bool {
		return dlock.LocalWaiters(a, name) == 6 && dlock.LocalWaiters(b, name) == 6
	}, "every goroutine to line up")
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	run := 1
	for i := 1; i < len(order); i++ {
		if order[i] == order[i-1] {
			run++
		} else {
			run = 1
		}
		if run > 2 && i < len(order)-3 {
			t.Fatalf("grant order %v: a client got %d turns in a row while the other waited", order, run)
		}
	}
}

func TestLocalWaitersLeaveOneByOne(t *testing.T) {
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	holder, c := newClient(t, srv), newClient(t, srv)
	held := mustLock(t, holder, name)

	cancels := make([]context.CancelFunc, 3)
	errs := make(chan error, 3)
	for i := range cancels {
		wctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		go func() {
			_, err := c.Mutex(name).Lock(wctx)
			errs <- err
		}()
	}
	waitQueued(t, srv, name, 1)
	waitFor(t, 10*time.Second, func() bool { return dlock.LocalWaiters(c, name) == len(cancels) }, "every goroutine to line up")
	for i, cancel := range cancels {
		cancel()
		if err := <-errs; !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Fatalf("waiter %d: got %v, want ErrNotObtained and Canceled", i, err)
		}
		if i < len(cancels)-1 {
			if n := srv.Client(t).ZCard(ctx, lockKey(name)+":q").Val(); n != 1 {
				t.Fatalf("the client left the queue while %d of its waiters still wait", len(cancels)-1-i)
			}
		}
	}
	waitFor(t, 5*time.Second, func() bool {
		return srv.Client(t).ZCard(ctx, lockKey(name)+":q").Val() == 0
	}, "the client to leave the queue with its last waiter")
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := srv.Client(t).Exists(ctx, lockKey(name)).Val(); n != 0 {
		t.Error("the lock was handed to a client nobody waits in")
	}
}
