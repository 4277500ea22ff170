package driverkit

import (
	"context"
	"sync"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/workers"
)

// Batching. A caller alone sends its script straight away: nothing is
// faster for it. When other callers' commands are already in flight, a call
// joins a batch instead, and everything queued goes out as one pipeline:
// one write and one read for many scripts, on the client and on the
// server. Under load this is what keeps the lock's cost close to the
// server's work rather than to one round trip per caller. Only for a
// library that does not pipeline concurrent callers by itself
// (Lib.Combine): go-redis gained auto-pipelining only in releases that need
// a newer Go than dlock does.
//
// There are no flusher goroutines: the callers send (combining). Up to
// senders pipelines may be in flight. A caller that finds a sending slot
// free takes it and sends its own calls together with whatever is queued;
// one that finds none queues and waits. A sender that comes back with
// callers still queued passes its slot to the first of them, which sends
// the queue in turn. So a batched call costs at most one goroutine wake-up
// (its result, or its turn to send); a flusher goroutine would add a second.

const (
	// senders is how many pipelines may be in flight at once: while some
	// are on the wire, the next batch gathers. Fewer starve the server at
	// a handful of callers; more send most calls alone, one write and one
	// read each. bench/levers.md ("Six sending slots") has the measurements.
	senders = 6
	// maxBatch bounds one pipeline, so one slow batch delays few callers.
	maxBatch = 256
)

// batch is one Run's calls waiting to be pipelined. Its caller is woken
// with a send on done, not a close, so that it can put the batch back in
// batchPool for the next call. A caller that stopped waiting leaves its
// batch to the garbage collector when a sender may still hold it.
type batch struct {
	calls []*driver.Call
	done  chan struct{} // capacity 1: a wake-up never blocks
	state batchState    // guarded by batcher.mu
	// left, made when the caller stops waiting while a sender holds the
	// batch, is closed when that sender is done with it (InFlightError).
	left chan struct{} // guarded by batcher.mu
}

type batchState int

const (
	batchQueued  batchState = iota // waiting in the queue
	batchSending                   // taken into a pipeline
	batchDone                      // its calls have their replies
	batchLead                      // given a sending slot: send the queue
)

var batchPool = sync.Pool{New: func() any { return &batch{done: make(chan struct{}, 1)} }}

// recycle puts a batch that no sender holds back in the pool.
func (bt *batch) recycle() {
	bt.calls, bt.left = nil, nil
	batchPool.Put(bt)
}

// batcher owns the queue and the sending slots.
type batcher struct {
	run     func(context.Context, []*driver.Call) // the driver's send for a shared pipeline
	workers *workers.Pool                         // run the helpers; the driver's Close waits for them

	mu    sync.Mutex
	busy  int // sending slots in use, at most senders
	queue []*batch
	// closing: no helper starts any more (see close).
	closing bool
}

// submit sends calls in a pipeline with other callers' and waits for them.
// A caller that may leave early (Driver.LeaveEarly) waits for them or
// for ctx: then every call not done has ctx's error. Such a caller never
// sends itself, since it could not leave a pipeline on the wire: a helper
// goroutine sends in its place, and the pipeline fills copies of its calls,
// so a caller that left never shares its calls with a sender.
func (b *batcher) submit(ctx context.Context, calls []*driver.Call, leave bool) {
	if !leave {
		b.submitAndSend(calls)
		return
	}
	mine := copyCalls(calls)
	bt := batchPool.Get().(*batch)
	bt.calls, bt.state = mine, batchQueued

	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		bt.recycle()
		b.run(ctx, calls)
		return
	}
	if b.busy < senders {
		b.busy++
		b.helpLocked(bt)
	} else {
		b.queue = append(b.queue, bt)
	}
	b.mu.Unlock()

	for {
		select {
		case <-bt.done:
			b.mu.Lock()
			if bt.state == batchLead {
				// Given a slot: a helper sends bt and the queue.
				if b.closing {
					b.leaveLocked(bt)
					b.mu.Unlock()
					b.run(ctx, calls)
					return
				}
				b.helpLocked(bt)
				b.mu.Unlock()
				continue
			}
			b.mu.Unlock()
			restoreCalls(calls, mine)
			bt.recycle()
			return
		case <-ctx.Done():
			b.mu.Lock()
			if bt.state == batchDone {
				// Done as well: keep the outcome, and take the wake-up
				// sent with it so that the batch can be reused.
				b.mu.Unlock()
				<-bt.done
				restoreCalls(calls, mine)
				bt.recycle()
				return
			}
			left := b.leaveLocked(bt)
			b.mu.Unlock()
			err := ctx.Err()
			if left != nil {
				err = &driver.InFlightError{Err: err, Done: left}
			}
			failAll(calls, err)
			return
		}
	}
}

// submitAndSend is submit for a caller that waits for its calls whatever
// happens: it sends them itself, with what else is queued, when a slot is
// free or when it is given one; else a sender wakes it with the replies.
func (b *batcher) submitAndSend(calls []*driver.Call) {
	bt := batchPool.Get().(*batch)
	bt.calls, bt.state = calls, batchQueued

	b.mu.Lock()
	if b.busy < senders {
		b.busy++
		bt.state = batchSending
		b.mu.Unlock()
		b.send(bt, true)
		bt.recycle()
		return
	}
	b.queue = append(b.queue, bt)
	b.mu.Unlock()

	<-bt.done
	b.mu.Lock()
	lead := bt.state == batchLead
	if lead {
		bt.state = batchSending
	}
	b.mu.Unlock()
	if lead {
		b.send(bt, true)
	}
	bt.recycle()
}

// helpLocked starts a helper that sends bt, and what is queued, on a slot
// just taken or given for bt.
func (b *batcher) helpLocked(bt *batch) {
	bt.state = batchSending // from now on, bt's caller may leave but not give the slot away
	b.workers.Go(func() { b.send(bt, false) })
}

// leaveLocked takes bt out of the batching when its caller stops waiting:
// out of the queue if no sender took it yet; a slot it was given and did
// not use goes to the next queued caller (or is freed). A sender that took
// bt still holds it and will write into the copies; the caller drops bt
// then, and leaveLocked returns a channel that the sender closes when it
// is done with bt (nil when no sender holds it).
func (b *batcher) leaveLocked(bt *batch) (left <-chan struct{}) {
	switch bt.state {
	case batchSending:
		bt.left = make(chan struct{})
		return bt.left
	case batchQueued:
		for i, q := range b.queue {
			if q == bt {
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				break
			}
		}
	case batchLead:
		b.handOnLocked()
	}
	return nil
}

// send sends one pipeline on the slot taken or given for first: first's
// calls, then what is queued, from the head, up to maxBatch calls. Then it
// wakes the callers it sent for (first's only when its caller is not the
// one sending: firstIsCaller false) and passes the slot on.
func (b *batcher) send(first *batch, firstIsCaller bool) {
	sc := senderListsPool.Get().(*senderLists)
	taken := append(sc.taken[:0], first)
	calls := append(sc.calls[:0], first.calls...)
	b.mu.Lock()
	n := 0
	for n < len(b.queue) && len(calls)+len(b.queue[n].calls) <= maxBatch {
		q := b.queue[n]
		q.state = batchSending
		taken = append(taken, q)
		calls = append(calls, q.calls...)
		n++
	}
	b.queue = append(b.queue[:0], b.queue[n:]...)
	if len(b.queue) > 0 && b.busy < senders {
		// More than one pipeline's worth is queued and a slot is free.
		b.busy++
		b.leadLocked(b.popLocked())
	}
	b.mu.Unlock()

	// Each caller bounds its own wait; the pipeline itself is bounded by
	// the client's read and write timeouts.
	b.run(context.Background(), calls)

	b.mu.Lock()
	for _, q := range taken {
		q.state = batchDone
		if q.left != nil {
			close(q.left) // its caller left: nobody takes the wake-up
			continue
		}
		if q != first || !firstIsCaller {
			q.done <- struct{}{}
		}
	}
	b.handOnLocked()
	b.mu.Unlock()
	clear(taken) // a woken caller may reuse its batch
	clear(calls) // drop references to finished calls
	sc.taken, sc.calls = taken, calls
	senderListsPool.Put(sc)
}

// senderLists is a sender's lists, reused from pipeline to pipeline.
type senderLists struct {
	taken []*batch
	calls []*driver.Call
}

var senderListsPool = sync.Pool{New: func() any { return new(senderLists) }}

// handOnLocked passes a slot that its holder no longer needs to the first
// queued caller, or frees it.
func (b *batcher) handOnLocked() {
	if len(b.queue) == 0 {
		b.busy--
		return
	}
	b.leadLocked(b.popLocked())
}

func (b *batcher) popLocked() *batch {
	q := b.queue[0]
	b.queue = append(b.queue[:0], b.queue[1:]...)
	return q
}

// leadLocked wakes q, taken out of the queue, to send with the slot it is
// given.
func (b *batcher) leadLocked(q *batch) {
	q.state = batchLead
	q.done <- struct{}{}
}

// close starts no more helpers: afterwards a caller that may leave early
// sends its own calls. Driver.Close then waits for the helpers still
// sending (workers.Pool.Close), which must not be closed before this:
// helpLocked hands work to the pool under b.mu, and a closed pool would run
// it right there.
func (b *batcher) close() {
	b.mu.Lock()
	b.closing = true
	b.mu.Unlock()
}

// idle reports whether the batcher holds no slot and queues nothing.
func (b *batcher) idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.busy == 0 && len(b.queue) == 0
}
