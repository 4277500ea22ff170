package dlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// nodeCalls makes a copy of c for each node, or for the nodes set in which
// when it is not nil (nil elsewhere: fanout skips those). The calls share
// c's keys and arguments, which drivers only read, and one
// backing array: a fan-out costs a few allocations, not a few per node.
func (m *RedlockMutex) nodeCalls(which []bool, c *protocol.Call) []*driver.Call {
	n := len(m.r.nodes)
	backing := make([]driver.Call, n)
	calls := make([]*driver.Call, n)
	for i := range calls {
		if which == nil || which[i] {
			backing[i] = driver.Call{Script: c.Script, Keys: c.Keys, Args: c.Args}
			calls[i] = &backing[i]
		}
	}
	return calls
}

// fanoutTail is what a fan-out leaves running when its caller stops
// waiting: settled closes once every request has returned, and returned
// then gives, once each, the nodes whose requests returned after the wait
// (buffered: the requests never wait for a reader). expired closes at the
// fan-out's deadline, once settled has closed, or when the requests' ctx
// ends, whichever comes first (nil when nothing was asked).
type fanoutTail struct {
	settled  <-chan struct{}
	returned <-chan int
	expired  <-chan struct{}
}

// nodeReply is one node's outcome in a fan-out.
type nodeReply struct {
	skipped bool // not asked
	done    bool // returned before the fan-out stopped waiting
	// late: not done when the fan-out stopped waiting at its deadline
	// (a node not done without it was left earlier, by ctx or enough)
	late   bool
	reply  any
	err    error
	resent bool // the node's client sent the script more than once (driver.Call.Resent)
}

// fanout sends calls[i] to node i (nil: skip the node), all in parallel,
// each bounded by deadline and ctx. It returns when every node has returned,
// when enough (if not nil) says the outcome is decided (which it may say
// before any node has), when ctx ends, or at the deadline, whichever comes
// first. Requests still running then finish in the background, bounded by
// the deadline if the node's client honours context deadlines (otherwise
// by its read timeout); their outcome is dropped, settled closes once all
// have returned, and Close waits for them. How each request ends tells
// whether its node answers (redlock_silent.go). The tail tells how the
// requests left running end.
func (r *Redlock) fanout(ctx context.Context, deadline time.Time, calls []*driver.Call, enough func([]nodeReply) bool) ([]nodeReply, fanoutTail) {
	return r.fanoutRun(ctx, ctx.Done(), deadline, calls, enough, nil)
}

// fanoutDetached is fanout whose requests outlive ctx's cancellation, as a
// release must: they run to their deadline or their reply however ctx
// ends, and only the wait for them ends with ctx.
func (r *Redlock) fanoutDetached(ctx context.Context, deadline time.Time, calls []*driver.Call, enough func([]nodeReply) bool) ([]nodeReply, fanoutTail) {
	stop := ctx.Done()
	if stop != nil { // a ctx that cannot end needs no detaching
		ctx = context.WithoutCancel(ctx)
	}
	return r.fanoutRun(ctx, stop, deadline, calls, enough, nil)
}

// fanoutFirst is fanout whose requests each try first(ctx, i, calls[i]),
// on node i, before the call: the call is not sent when first reports that
// it settled it.
func (r *Redlock) fanoutFirst(ctx context.Context, deadline time.Time, calls []*driver.Call, enough func([]nodeReply) bool, first func(ctx context.Context, i int, c *driver.Call) bool) ([]nodeReply, fanoutTail) {
	return r.fanoutRun(ctx, ctx.Done(), deadline, calls, enough, first)
}

// fanoutRun is fanoutFirst whose requests run under ctx and whose wait
// ends when stop closes.
func (r *Redlock) fanoutRun(ctx context.Context, stop <-chan struct{}, deadline time.Time, calls []*driver.Call, enough func([]nodeReply) bool, first func(ctx context.Context, i int, c *driver.Call) bool) ([]nodeReply, fanoutTail) {
	start := time.Now()
	replies := make([]nodeReply, len(calls))
	asked := 0
	for i, c := range calls {
		if c == nil {
			replies[i].skipped = true
		} else {
			asked++
		}
	}
	f := &fanoutRequests{r: r, ctx: ctx, calls: calls, first: first, settled: make(chan struct{})}
	if asked == 0 {
		close(f.settled)
		return replies, fanoutTail{settled: f.settled}
	}
	f.results = make(chan int, asked) // buffered: a straggler never blocks
	f.left.Store(int32(asked))
	// One deadline for the whole fan-out: the nodes' requests share it,
	// and the wait below ends with it.
	f.nctx, f.cancel = context.WithDeadline(ctx, deadline)
	for i, c := range calls {
		if c != nil {
			i := i // go 1.21: one i for every iteration
			r.workers.Go(func() { f.send(i) })
		}
	}
	tail := fanoutTail{settled: f.settled, returned: f.results, expired: f.nctx.Done()}
	if enough != nil && enough(replies) {
		return replies, tail
	}
	for got := 0; got < asked; got++ {
		select {
		case i := <-f.results:
			f.take(replies, i)
			if enough != nil && enough(replies) {
				return replies, tail
			}
		case <-f.nctx.Done():
			// The deadline, the end of ctx (then stop is closed too, for a
			// fanout that stops with ctx), or every request returned (then
			// their results are all in the channel).
			select {
			case <-stop:
				return replies, tail
			default:
			}
			f.drain(replies)
			if errors.Is(f.nctx.Err(), context.DeadlineExceeded) {
				r.late(replies, deadline.Sub(start))
			}
			return replies, tail
		case <-stop:
			return replies, tail
		}
	}
	return replies, tail
}

// fanoutRequests are the requests of one fan-out, which run on the
// Redlock's workers: calls[i] goes to node i under nctx, which ends at the
// fan-out's deadline. The last request to return cancels nctx and closes
// settled.
type fanoutRequests struct {
	r       *Redlock
	ctx     context.Context // the requests' own, without the deadline
	nctx    context.Context
	cancel  context.CancelFunc
	calls   []*driver.Call
	first   func(ctx context.Context, i int, c *driver.Call) bool
	results chan int
	settled chan struct{}
	left    atomic.Int32
}

// send runs the request to node i. The fan-out stops waiting at the
// deadline by itself: the driver need not hand the call to another
// goroutine for that.
func (f *fanoutRequests) send(i int) {
	c := f.calls[i]
	if f.first == nil || !f.first(f.nctx, i, c) {
		f.r.nodes[i].drv.RunToReply(f.nctx, c)
	}
	f.r.nodes[i].health.note(c.Err, f.ctx.Err() != nil)
	f.results <- i
	if f.left.Add(-1) == 0 {
		close(f.settled) // first: expired then finds it closed
		f.cancel()
	}
}

// take records node i's reply, whose request has returned.
func (f *fanoutRequests) take(replies []nodeReply, i int) {
	c := f.calls[i]
	replies[i] = nodeReply{done: true, reply: c.Reply, err: c.Err, resent: c.Resent}
}

// drain records the replies whose requests have returned by now.
func (f *fanoutRequests) drain(replies []nodeReply) {
	for {
		select {
		case i := <-f.results:
			f.take(replies, i)
		default:
			return
		}
	}
}

// late ends a fan-out at its deadline, wait after its start: the nodes
// still without a reply did not answer in time.
func (r *Redlock) late(replies []nodeReply, wait time.Duration) {
	for i, rep := range replies {
		if !rep.skipped && !rep.done {
			replies[i].late = true
			r.nodes[i].health.timedOut(wait)
		}
	}
}

// nodeError describes node i's failure: err, or no reply (done false)
// within wait. A deadline of the node's own request reads as a timeout, so
// that only the caller's context ever makes an error match its ctx error.
func (r *Redlock) nodeError(ctx context.Context, i int, done bool, err error, wait time.Duration) *NodeError {
	timeout := func() error {
		return fmt.Errorf("no reply within the node timeout of %v: %w", wait.Round(time.Microsecond), os.ErrDeadlineExceeded)
	}
	var rerr *driver.ReplyError
	switch {
	case ctx.Err() != nil && (!done || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		err = ctx.Err()
	case !done || errors.Is(err, context.DeadlineExceeded):
		err = timeout()
	case errors.As(err, &rerr) && errs.IsConflictReply(rerr.Msg):
		err = fmt.Errorf("%w: %s (dlock did not write this key and leaves it untouched)", ErrKeyConflict, errs.ConflictDetail(rerr.Msg))
	}
	return &NodeError{Addr: r.nodes[i].addr, Err: err}
}

// nodeErrors are the failed nodes of one operation. It unwraps to each
// *NodeError, for errors.As and errors.Is.
type nodeErrors []*NodeError

func (e nodeErrors) Error() string {
	parts := make([]string, len(e))
	for i, ne := range e {
		parts[i] = ne.Error()
	}
	return strings.Join(parts, "; ")
}

func (e nodeErrors) Unwrap() []error {
	list := make([]error, len(e))
	for i, ne := range e {
		list[i] = ne
	}
	return list
}

// orNil returns e as an error, or nil (not a typed nil) when empty.
func (e nodeErrors) orNil() error {
	if len(e) == 0 {
		return nil
	}
	return e
}
