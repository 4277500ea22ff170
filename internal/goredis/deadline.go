package goredis

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
)

// go-redis bounds a command by its context's deadline only when the client
// was built with ContextTimeoutEnabled; otherwise a command blocked on a
// silent server waits for the client's ReadTimeout (3 s by default),
// whatever the context says. Run must return at its context's deadline (a
// Lock must give up at its deadline, a renewal at the lease's), so for such
// clients a call whose context has a deadline runs in a goroutine of the
// driver's, on copies of the calls, and Run returns at the deadline. The
// abandoned command finishes within the ReadTimeout; Close waits for it.
//
// A context that can be cancelled but has no deadline (a request's, a
// signal's) does not pay for that goroutine: its call runs in the caller,
// and a cancellation takes effect when the round trip ends, within the
// client's read and write timeouts on a silent server, as with go-redis
// itself (which never interrupts a read on cancellation, even with
// ContextTimeoutEnabled). The goroutine cost an uncontended Lock 5
// allocations and about 15 µs of client CPU, more than the rest of dlock's
// own work (docs/design.md, "Contexts and round trips"). Only a client that
// never times out a read or a write, or one whose options dlock cannot
// read, keeps the goroutine for every context that can end: nothing else
// would end its calls.

// timeouts is what a go-redis client's options say about ending a call
// by themselves. go-redis normalizes the options it is given: in Options(),
// a timeout > 0 bounds every read or write; 0 means none (the call waits
// for ever); -1 means the client never sets a deadline, not even a
// context's.
type timeouts struct {
	bounded  bool          // go-redis itself ends a call at its context's deadline
	timesOut bool          // the read and write timeouts end a call on a silent server
	read     time.Duration // the read timeout; 0 for none, or a client whose options dlock cannot read
}

func clientTimeouts(rdb Client) timeouts {
	var (
		ctxTimeout  bool
		read, write time.Duration
	)
	switch c := rdb.(type) {
	case *redis.Client:
		o := c.Options()
		ctxTimeout, read, write = o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout
	case *redis.ClusterClient:
		o := c.Options()
		ctxTimeout, read, write = o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout
	default:
		return timeouts{} // a wrapper: assume nothing ends its calls
	}
	return timeouts{
		bounded:  ctxTimeout && read >= 0 && write >= 0,
		timesOut: read > 0 && write > 0,
		read:     max(read, 0),
	}
}

// mustLeaveEarly reports whether a caller with ctx must be able to stop
// waiting before its round trip ends: when ctx has a deadline, or when ctx
// can end and nothing else would end a call on a silent server (see above).
// A batched call then waits on copies (batch.go); a direct one runs in a
// goroutine of the driver's unless go-redis itself enforces the deadline
// (enforcesDeadline).
func (d *Driver) mustLeaveEarly(ctx context.Context) bool {
	if ctx.Done() == nil {
		return false
	}
	if !d.io.timesOut {
		return true
	}
	_, hasDeadline := ctx.Deadline()
	return hasDeadline
}

// enforcesDeadline reports whether go-redis ends a call of ctx, sent with
// ctx, at ctx's deadline. Pipelines of batched calls are sent with
// context.Background(), so this holds for direct calls only.
func (d *Driver) enforcesDeadline(ctx context.Context) bool {
	_, hasDeadline := ctx.Deadline()
	return hasDeadline && d.io.bounded
}

// runBounded runs calls on one of the driver's workers and returns when
// they are done or ctx ends; then every call not done has ctx's error, as
// a driver.InFlightError that tells when the worker is done with them. The
// abandoned command finishes on the worker, and Close waits for it. After
// Close the worker is the caller itself (workers.Pool.Go), so the calls are
// done before the select, and keep their outcome even if ctx has ended.
func (d *Driver) runBounded(ctx context.Context, calls []*driver.Call) {
	copies := copyCalls(calls)
	done := make(chan struct{})
	d.workers.Go(func() {
		defer close(done)
		d.run(ctx, copies)
	})
	select {
	case <-done:
	case <-ctx.Done():
		select {
		case <-done: // done as well: keep the outcome
		default:
			failAll(calls, &driver.InFlightError{Err: ctx.Err(), Done: done})
			return
		}
	}
	restoreCalls(calls, copies)
}

// copyCalls returns copies of calls for a sender whose caller may stop
// waiting: the sender fills the copies, never calls the caller has left.
func copyCalls(calls []*driver.Call) []*driver.Call {
	copies := make([]*driver.Call, len(calls))
	for i, c := range calls {
		cc := *c
		copies[i] = &cc
	}
	return copies
}

// restoreCalls gives calls the outcomes the sender wrote into copies.
func restoreCalls(calls, copies []*driver.Call) {
	for i, c := range calls {
		*c = *copies[i]
	}
}

// failAll gives every call err.
func failAll(calls []*driver.Call, err error) {
	for _, c := range calls {
		c.Reply, c.Acked, c.Err = nil, 0, err
	}
}
