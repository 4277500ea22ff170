package driverkit

import (
	"context"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/workers"
)

// Run must return at its context's deadline (a Lock gives up at its
// deadline, a renewal at the lease's), but not every library ends a call
// there: go-redis bounds a command by its context's deadline only when the
// client was built with ContextTimeoutEnabled, and otherwise a command
// blocked on a silent server waits for the client's ReadTimeout (3 s by
// default). For such a library a call whose context has a deadline runs on
// one of the driver's goroutines, on copies of the calls, and Run returns
// at the deadline with a driver.InFlightError; the abandoned command
// finishes within the library's timeouts, and Close waits for it.
//
// A context that can be cancelled but has no deadline (a request's, a
// signal's) does not pay for that goroutine: its call runs in the caller,
// and a cancellation takes effect when the round trip ends, within the
// library's read and write timeouts on a silent server (go-redis never
// interrupts a read on cancellation). The goroutine costs a call more
// client CPU than the rest of dlock's own work (docs/design.md, "Contexts
// and round trips"). Only a library that never times out a read or a
// write keeps the goroutine for every context that can end: nothing else
// would end its calls.

// Ends says what ends a library's call besides its reply.
type Ends struct {
	// Deadline: the library ends a call sent with a context at that
	// context's deadline.
	Deadline bool
	// Timeouts: read and write timeouts end a call on a silent server.
	Timeouts bool
}

// Run implements driver.Driver: Dispatch, leaving calls on their way at
// ctx's end when the library would not end them there (LeaveEarly).
//
// A lone call goes out at once: nothing is faster for it. Calls that find
// others in flight join a shared pipeline when the library does not
// pipeline concurrent callers by itself (Lib.Combine, batch.go). Several
// calls of one Run share a pipeline (split per node on a Cluster), each
// script followed by its WAIT when asked (run.go).
func (d *Driver[C]) Run(ctx context.Context, calls ...*driver.Call) {
	d.Dispatch(ctx, calls, d.LeaveEarly(ctx))
}

// Dispatch is Run for a caller that chooses whether it must be able to stop
// waiting before the replies come (leave; see LeaveEarly). A caller that
// stops waiting by itself, such as a worker of a fan-out with a timer of
// its own, passes false: it then waits for the replies even when ctx has a
// deadline that the library does not enforce.
func (d *Driver[C]) Dispatch(ctx context.Context, calls []*driver.Call, leave bool) {
	if len(calls) == 0 {
		return
	}
	active := d.active.Add(1)
	switch {
	case active > 1 && d.lib.Combine && !needsWait(calls):
		// Others' commands are in flight: join the next pipeline. Calls
		// with WAIT never do: WAIT must follow its own script.
		d.batch.submit(ctx, calls, leave)
	case leave && !d.enforcesDeadline(ctx):
		runBounded(d.workers, ctx, calls, d.sendFn)
	default:
		d.send(ctx, calls)
	}
	d.active.Add(-1)
	for _, c := range calls {
		settleDeadline(ctx, c.Err)
	}
}

// LeaveEarly reports whether a caller with ctx must be able to stop waiting
// before its round trip ends: when ctx has a deadline, or when ctx can end
// and nothing else would end a call on a silent server (see above).
func (d *Driver[C]) LeaveEarly(ctx context.Context) bool {
	if ctx.Done() == nil {
		return false
	}
	if !d.lib.Ends.Timeouts {
		return true
	}
	_, hasDeadline := ctx.Deadline()
	return hasDeadline
}

// enforcesDeadline reports whether the library ends a call sent with ctx
// at ctx's deadline. Shared pipelines go with a context of their own, so
// this holds for direct calls only.
func (d *Driver[C]) enforcesDeadline(ctx context.Context) bool {
	_, hasDeadline := ctx.Deadline()
	return hasDeadline && d.lib.Ends.Deadline
}

func needsWait(calls []*driver.Call) bool {
	for _, c := range calls {
		if c.Replicas > 0 {
			return true
		}
	}
	return false
}

// runBounded runs calls with run on one of the workers and returns
// when they are done or ctx ends; then every call not done has ctx's error,
// as a driver.InFlightError that tells when the worker is done with them.
// After Close the worker is the caller itself (workers.Pool.Go), so the
// calls are done before the select and keep their outcome even if ctx has
// ended. A context that never ends runs calls in the caller. (Not a method
// of the generic Driver: its closure would carry the type's dictionary, a
// larger allocation per call.)
func runBounded(workers *workers.Pool, ctx context.Context, calls []*driver.Call, run func(context.Context, []*driver.Call)) {
	if ctx.Done() == nil {
		run(ctx, calls)
		return
	}
	copies := copyCalls(calls)
	done := make(chan struct{})
	workers.Go(func() {
		defer close(done)
		run(ctx, copies)
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
