package goredis

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/dlock-go/dlock/driver"
)

// Batching. A caller alone sends its script straight away: nothing is
// faster for it. When other callers' commands are already in flight, a call
// joins a queue instead, and a flusher sends everything queued as one
// pipeline: one write and one read for many scripts, on the client and on
// the server. Under load this is what keeps the lock's cost close to the
// server's work rather than to one round trip per caller (go-redis gained
// auto-pipelining only in releases that need a newer Go than dlock does).

const (
	// flushers is how many pipelines may be in flight at once: while some
	// are on the wire, the next batch gathers. Fewer starve the server at
	// a handful of callers (each call waits for a flusher to come back);
	// more add goroutine hand-offs without larger batches. 4 was the best
	// of 2, 3, 4, 6 and 8 at 8 and at 64 goroutines (BenchmarkUncontended,
	// two cores shared with redis-server).
	flushers = 4
	// maxBatch bounds one pipeline, so one slow batch delays few callers.
	maxBatch = 256
)

// batch is one Run's calls waiting to be pipelined. The flusher signals
// done with a send, not a close, so that a caller that received it can put
// the batch back in batchPool for the next call: two allocations fewer per
// batched call. A caller that stopped waiting leaves its batch to the
// garbage collector, since the flusher may still hold it.
type batch struct {
	calls []*driver.Call
	done  chan struct{} // capacity 1: the flusher's send never blocks
}

var batchPool = sync.Pool{New: func() any { return &batch{done: make(chan struct{}, 1)} }}

// recycle puts a batch that no flusher holds back in the pool.
func (bt *batch) recycle() {
	bt.calls = nil
	batchPool.Put(bt)
}

// batcher owns the queue and the flusher goroutines, started on first use.
type batcher struct {
	run func(context.Context, []*driver.Call) // the driver's pipelined send

	// mu guards closing and started; a submit holds it for reading while
	// it hands a batch over, so close never closes the queue under a send.
	mu      sync.RWMutex
	closing bool
	started atomic.Bool
	queue   chan *batch
	wg      sync.WaitGroup
}

// start launches the flushers; false once closing.
func (b *batcher) start() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closing {
		return false
	}
	if !b.started.Load() {
		b.queue = make(chan *batch, maxBatch)
		for i := 0; i < flushers; i++ {
			b.wg.Add(1)
			go b.flush()
		}
		b.started.Store(true)
	}
	return true
}

// submit sends calls in the next pipeline and waits for them. A caller
// that may leave early (Driver.mustLeaveEarly) waits for them or for ctx:
// then every call not done has ctx's error (the pipeline fills copies, so a
// caller that left never shares its calls with a flusher). Any caller may
// leave while its batch is still queued.
func (b *batcher) submit(ctx context.Context, calls []*driver.Call, leave bool) {
	if !b.started.Load() && !b.start() {
		b.run(ctx, calls)
		return
	}
	mine := calls
	if leave {
		mine = make([]*driver.Call, len(calls))
		for i, c := range calls {
			cc := *c
			mine[i] = &cc
		}
	}
	bt := batchPool.Get().(*batch)
	bt.calls = mine

	b.mu.RLock()
	if b.closing {
		b.mu.RUnlock()
		bt.recycle()
		b.run(ctx, calls)
		return
	}
	select {
	case b.queue <- bt:
		b.mu.RUnlock()
	case <-ctx.Done():
		b.mu.RUnlock()
		bt.recycle()
		failAll(calls, ctx.Err())
		return
	}
	if !leave {
		<-bt.done
		bt.recycle()
		return
	}
	select {
	case <-bt.done:
		for i, c := range calls {
			*c = *mine[i]
		}
		bt.recycle()
	case <-ctx.Done():
		failAll(calls, ctx.Err())
	}
}

func failAll(calls []*driver.Call, err error) {
	for _, c := range calls {
		c.Reply, c.Acked, c.Err = nil, 0, err
	}
}

// flush sends queued batches until close. Each pipeline takes what is
// queued when it starts, up to maxBatch calls.
func (b *batcher) flush() {
	defer b.wg.Done()
	var (
		pending []*batch
		calls   []*driver.Call
	)
	for first := range b.queue {
		pending = append(pending[:0], first)
		calls = append(calls[:0], first.calls...)
	gather:
		for len(calls) < maxBatch {
			select {
			case more, ok := <-b.queue:
				if !ok {
					break gather
				}
				pending = append(pending, more)
				calls = append(calls, more.calls...)
			default:
				break gather
			}
		}
		// Each caller bounds its own wait; the pipeline itself is bounded
		// by the client's read and write timeouts.
		b.run(context.Background(), calls)
		for _, p := range pending {
			p.done <- struct{}{}
		}
		clear(pending) // a caller may reuse its batch once signalled
		clear(calls)   // drop references to finished calls
	}
}

// close stops the flushers after they sent everything queued; later calls
// are sent by their callers.
func (b *batcher) close() {
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		return
	}
	b.closing = true
	b.mu.Unlock()
	if b.started.Load() {
		close(b.queue)
		b.wg.Wait()
	}
}
