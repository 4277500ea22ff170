package goredis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
)

var echo = driver.NewScript("return ARGV[1]")

// idle reports whether the batcher holds no slot and queues nothing.
func (b *batcher) idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.busy == 0 && len(b.queue) == 0
}

// hammer runs calls of echo from goroutines at once, each with a context
// made by ctxFor, and reports any call that got a reply other than its own
// argument or an error other than its context's.
func hammer(t *testing.T, d *Driver, goroutines, calls int, ctxFor func(i int) (context.Context, context.CancelFunc)) (replies, ended int) {
	t.Helper()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for g := 0; g < goroutines; g++ {
		g := g
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				want := fmt.Sprintf("%d/%d", g, i)
				ctx, cancel := ctxFor(g*calls + i)
				c := &driver.Call{Script: echo, Keys: []string{"k"}, Args: []any{want}}
				d.Run(ctx, c)
				cancel()
				mu.Lock()
				switch {
				case c.Err == nil && c.Reply == want:
					replies++
				case c.Err != nil && (errors.Is(c.Err, context.DeadlineExceeded) || errors.Is(c.Err, context.Canceled)):
					ended++
				default:
					t.Errorf("call %s: reply %v, error %v", want, c.Reply, c.Err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return replies, ended
}

// TestBatchedCallsGetTheirOwnReplies: 64 goroutines share pipelines, with
// contexts of every kind (none, cancellable, deadline); every call gets its
// own reply, and the batcher ends with no slot held and nothing queued.
func TestBatchedCallsGetTheirOwnReplies(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	d := New(rdb)
	defer d.Close()
	replies, ended := hammer(t, d, 64, 200, func(i int) (context.Context, context.CancelFunc) {
		switch i % 3 {
		case 0:
			return context.Background(), func() {}
		case 1:
			return context.WithCancel(context.Background())
		}
		return context.WithTimeout(context.Background(), time.Minute)
	})
	if replies != 64*200 || ended != 0 {
		t.Errorf("%d replies and %d ended calls, want %d and 0", replies, ended, 64*200)
	}
	if !d.batch.idle() {
		t.Error("the batcher still holds a slot or a queue")
	}
}

// TestBatchedCallsLeaveAtTheirDeadline: on a slow link, callers whose
// deadline comes first leave their batches while others wait for replies;
// nobody gets another's reply, and the slots all come back.
func TestBatchedCallsLeaveAtTheirDeadline(t *testing.T) {
	proxy := redistest.StartProxy(t, redistest.Start(t).Addr())
	proxy.SetLatency(20 * time.Millisecond)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), PoolSize: 64})
	t.Cleanup(func() { _ = rdb.Close() })
	d := New(rdb)
	defer d.Close()
	replies, ended := hammer(t, d, 32, 10, func(i int) (context.Context, context.CancelFunc) {
		if i%2 == 0 {
			return context.WithTimeout(context.Background(), time.Millisecond)
		}
		return context.WithCancel(context.Background())
	})
	if replies < 32*10/2 || ended == 0 {
		t.Errorf("%d replies and %d ended calls: want every call without a deadline answered, and some with one ended", replies, ended)
	}
	if !d.batch.idle() {
		t.Error("the batcher still holds a slot or a queue")
	}
}
