package dlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestFairMutexGrantsInArrivalOrder queues waiters from several clients,
// several goroutines per client, interleaved, and checks that grants follow
// arrival order exactly.
func TestFairMutexGrantsInArrivalOrder(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	clients := []*dlock.Client{newClient(t, srv), newClient(t, srv), newClient(t, srv)}
	holder := mustLock(t, clients[0], name)

	const waiters = 9
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := 0; i < waiters; i++ {
		c := clients[i%len(clients)]
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			l, err := c.FairMutex(name).Lock(ctx)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(time.Millisecond) // a tiny critical section
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("waiter %d: Unlock: %v", i, err)
			}
		}(i)
		waitQueued(t, srv, name, int64(i+1))
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("grant order %v, want arrival order 0..%d", order, waiters-1)
		}
	}
}

func TestFairMutexAndMutexAreOneLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := context.Background()
	l := mustLock(t, c, t.Name())
	defer l.Unlock(ctx)
	if _, err := c.FairMutex(t.Name()).TryLock(ctx); err == nil {
		t.Fatal("a FairMutex took a name its Mutex holds")
	}
}
