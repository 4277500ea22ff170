package goredis

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
)

// go-redis bounds a command by its context's deadline only when the client
// was built with ContextTimeoutEnabled; otherwise a command blocked on a
// silent server waits for the client's ReadTimeout (3 s by default),
// whatever the context says. Run must return when its context ends (a Lock
// must give up at its deadline, a renewal at the lease's), so for such
// clients a call whose context can end runs in a goroutine of the driver's,
// on copies of the calls, and Run returns at the deadline. The abandoned
// command finishes within the ReadTimeout; Close waits for it.

// boundsContext reports whether go-redis itself honours context deadlines
// for rdb.
func boundsContext(rdb Client) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// background tracks commands still running after Run gave up on them.
type background struct {
	mu      sync.Mutex
	closing bool
	wg      sync.WaitGroup
}

// runBounded runs calls with run, returning when they are done or ctx ends;
// then every call not done has ctx's error.
func (b *background) runBounded(ctx context.Context, calls []*driver.Call, run func(context.Context, []*driver.Call)) {
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		run(ctx, calls)
		return
	}
	b.wg.Add(1)
	b.mu.Unlock()

	copies := make([]*driver.Call, len(calls))
	for i, c := range calls {
		cc := *c
		copies[i] = &cc
	}
	done := make(chan struct{})
	go func() {
		defer b.wg.Done()
		defer close(done)
		run(ctx, copies)
	}()
	select {
	case <-done:
		for i, c := range calls {
			*c = *copies[i]
		}
	case <-ctx.Done():
		for _, c := range calls {
			c.Reply, c.Acked, c.Err = nil, 0, ctx.Err()
		}
	}
}

// wait waits for abandoned commands; afterwards calls run in the caller.
func (b *background) wait() {
	b.mu.Lock()
	b.closing = true
	b.mu.Unlock()
	b.wg.Wait()
}
