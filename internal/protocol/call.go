// Package protocol runs dlock's scripts (internal/scripts): one function
// per script builds its arguments and reads its reply into typed results.
// A reply it cannot read is errs.Unexpected; a script's "not held" answer
// is errs.ErrNotHeld. It knows nothing of the primitives above it: they
// pass their keys, owner values and timings in.
package protocol

import (
	"context"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Call is one script call made in a single allocation: the driver.Call,
// the slice Run's variadic parameter takes, and the values its arguments
// point to. A string or an int64 put in an interface is an allocation of
// its own, a pointer to a field of the Call (or of a descriptor) is not
// (driver.Call.Args). args holds the most any script takes (five): each
// slot more is 16 bytes on every call.
type Call struct {
	driver.Call
	calls  [1]*driver.Call
	args   [5]any
	keys   [4]string
	member string
	next   string
	n      int64
}

// newCall returns a call of script on keys for member, whose arguments
// setArgs sets.
func newCall(script *driver.Script, keys []string, member string) *Call {
	c := &Call{member: member}
	c.Script, c.Keys = script, keys
	return c
}

// setArgs makes args the call's arguments, in the Call's own room when they
// fit, so that no argument is ever dropped.
func (c *Call) setArgs(args ...any) {
	if len(args) > len(c.args) {
		c.Args = append([]any(nil), args...)
		return
	}
	n := copy(c.args[:], args)
	c.Args = c.args[:n]
}

// Batch returns the call as the slice Driver.Run takes, for a caller that
// runs it, alone or with others, itself.
func (c *Call) Batch() []*driver.Call {
	c.calls[0] = &c.Call
	return c.calls[:]
}

// run sends the call, asking for WAIT as ack says.
func (c *Call) run(ctx context.Context, drv driver.Driver, ack Ack) {
	if ack.Replicas > 0 {
		c.Replicas, c.ReplicaTimeout = ack.Replicas, ack.Timeout
	}
	drv.Run(ctx, c.Batch()...)
}

// Ack asks for WAIT after a call that can grant or re-arm a hold:
// Replicas replicas within Timeout (driver.Call.Replicas). The zero Ack
// asks for none.
type Ack struct {
	Replicas int
	Timeout  time.Duration
}

// Pre-boxed script arguments: boxing a string a function returns
// allocates.
var (
	publishPlain   any = "PUBLISH"
	publishSharded any = "SPUBLISH"
	flagOne        any = "1"
	flagZero       any = "0"
	// JoinNew is mutex_acquire.lua's "join the queue" for an owner value
	// never queued before: a granted call skips removing its entry.
	JoinNew any = "n"
)

// sharded reports whether drv announces grants with SPUBLISH.
func sharded(drv driver.Driver) bool { return strings.EqualFold(drv.PublishCommand(), "SPUBLISH") }

// publishArg is drv's publish command as a script argument.
func publishArg(drv driver.Driver) any {
	if sharded(drv) {
		return publishSharded
	}
	return publishPlain
}

// Join is an acquire script's "join the queue when not granted" flag.
func Join(queue bool) any {
	if queue {
		return flagOne
	}
	return flagZero
}

// Pre-boxed modes (mutex_acquire.lua's ARGV[4]): strict arrival order or
// not, then grants announced with PUBLISH or SPUBLISH.
var (
	modeFree        any = "0p"
	modeFreeSharded any = "0s"
	modeFair        any = "1p"
	modeFairSharded any = "1s"
)

// LockMode is the mode argument of the Mutex's and the ReentrantMutex's
// scripts: strict arrival order (fair) or not, and grants announced with
// SPUBLISH or PUBLISH, as drv does.
func LockMode(drv driver.Driver, fair bool) any {
	s := sharded(drv)
	switch {
	case fair && s:
		return modeFairSharded
	case fair:
		return modeFair
	case s:
		return modeFreeSharded
	}
	return modeFree
}
