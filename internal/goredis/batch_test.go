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

// outcomes counts calls by how they ended, for calls whose context had a
// deadline ([1]) and the others ([0]).
type outcomes struct{ replies, ended [2]int }

// hammer runs calls of echo from goroutines at once, each with a context
// made by ctxFor, and reports any call that got a reply other than its own
// argument or an error other than its context's.
func hammer(t *testing.T, d *Driver, goroutines, calls int, ctxFor func(i int) (context.Context, context.CancelFunc)) (o outcomes) {
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
				kind := 0
				if _, ok := ctx.Deadline(); ok {
					kind = 1
				}
				cancel()
				mu.Lock()
				switch {
				case c.Err == nil && c.Reply == want:
					o.replies[kind]++
				case c.Err != nil && (errors.Is(c.Err, context.DeadlineExceeded) || errors.Is(c.Err, context.Canceled)):
					o.ended[kind]++
				default:
					t.Errorf("call %s: reply %v, error %v", want, c.Reply, c.Err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return o
}

// TestBatchedCallsGetTheirOwnReplies: 64 goroutines share pipelines, with
// contexts of every kind (none, cancellable, deadline); every call gets its
// own reply, and the batcher ends with no slot held and nothing queued.
func TestBatchedCallsGetTheirOwnReplies(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	d := New(rdb)
	defer d.Close()
	o := hammer(t, d, 64, 200, func(i int) (context.Context, context.CancelFunc) {
		switch i % 3 {
		case 0:
			return context.Background(), func() {}
		case 1:
			return context.WithCancel(context.Background())
		}
		return context.WithTimeout(context.Background(), time.Minute)
	})
	if replies := o.replies[0] + o.replies[1]; replies != 64*200 || o.ended != [2]int{} {
		t.Errorf("%d replies and %v ended calls, want %d and none", replies, o.ended, 64*200)
	}
	waitIdle(t, d)
}

// TestBatchedCallsLeaveAtTheirDeadline: on a slow link, callers whose
// deadline comes first leave their batches while others wait for replies;
// nobody gets another's reply, and the slots all come back. Also with
// ContextTimeoutEnabled: go-redis enforces deadlines for direct calls only,
// since a pipeline serves many callers.
func TestBatchedCallsLeaveAtTheirDeadline(t *testing.T) {
	for _, ctxTimeout := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeout), func(t *testing.T) {
			testBatchedCallsLeave(t, ctxTimeout)
		})
	}
}

func testBatchedCallsLeave(t *testing.T, ctxTimeout bool) {
	proxy := redistest.StartProxy(t, redistest.Start(t).Addr())
	proxy.SetLatency(50 * time.Millisecond)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), PoolSize: 64, ContextTimeoutEnabled: ctxTimeout})
	t.Cleanup(func() { _ = rdb.Close() })
	d := New(rdb)
	defer d.Close()
	o := hammer(t, d, 32, 10, func(i int) (context.Context, context.CancelFunc) {
		if i%2 == 0 {
			return context.WithTimeout(context.Background(), time.Millisecond)
		}
		return context.WithCancel(context.Background())
	})
	// A reply takes at least the link's 50 ms: a call with a 1 ms deadline
	// that got one waited past its deadline.
	if o.replies[0] != 32*10/2 || o.ended[1] != 32*10/2 {
		t.Errorf("calls without a deadline: %d replies of %d; with a 1 ms deadline: %d ended of %d (%d replies)",
			o.replies[0], 32*10/2, o.ended[1], 32*10/2, o.replies[1])
	}
	waitIdle(t, d)
}

// waitIdle waits for d's batcher to give back every slot and queue: calls
// that left at their deadline leave their pipelines in flight, whose
// senders return the slots when the replies come.
func waitIdle(t *testing.T, d *Driver) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !d.kit.Idle() {
		if time.Now().After(deadline) {
			t.Fatal("the batcher still holds a slot or a queue 10s after the last call returned")
		}
		time.Sleep(time.Millisecond)
	}
}
