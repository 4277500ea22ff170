// Package driverkit is the client-independent part of dlock's drivers: the
// go-redis one (internal/goredis) and those for github.com/redis/rueidis and
// its fork github.com/valkey-io/valkey-go (adapters/rueidis, adapters/valkey).
// It owns how calls are batched, when EVAL replaces EVALSHA, how WAIT stays
// on the script's connection, when Run returns before its replies (at its
// context's end), how replies are normalized, the reconnecting pub/sub
// subscription (plain, or sharded by Cluster slot), and the SCAN of every
// master that dlock's Client.List needs. A driver supplies a Lib, a handful
// of functions that build and send its library's commands, so no driver
// depends on another's library and all share one implementation of
// everything that could go subtly wrong.
//
// The adapter modules import this package through the root module, so an
// adapter release must require a root module version with a compatible
// driverkit; both live in this repository and are released together.
package driverkit

import (
	"context"
	"sync/atomic"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/workers"
)

// Result is one command's outcome under the driver conventions: Reply is
// nil, int64, string or []any of those, and Err is nil, a *driver.ReplyError
// for an error reply, or the library's transport error. A nil reply is not
// an error.
type Result struct {
	Reply any
	Err   error
	// Writes is how many times the library wrote the command: more than
	// once when it lost a reply and sent the command again (go-redis does
	// on a read timeout or a reset connection), so that a script may have
	// run twice (driver.Call.Resent). Zero when the library cannot tell.
	Writes int32
}

// DoMultiFunc sends cmds, pipelined, and stores their results, in order, in
// out, which has one element per command.
type DoMultiFunc[C any] func(ctx context.Context, cmds []C, out []Result)

// Lib is what the driver needs from a client library whose commands have
// type C. Fields marked optional may be nil or zero; the others are
// required. A Lib's functions must be safe for concurrent use.
type Lib[C any] struct {
	// EvalSha, Eval and Wait build the EVALSHA, EVAL and WAIT commands of a
	// call. Commands are built anew for every send.
	EvalSha func(c *driver.Call) C
	Eval    func(c *driver.Call) C
	Wait    func(c *driver.Call) C
	// Release, optional, takes back a command built above once its result
	// has been read, for a library whose command lines are reused.
	Release func(cmd C)

	// Do sends one command.
	Do func(ctx context.Context, cmd C) Result
	// DoMulti sends commands pipelined, split across a Cluster's nodes as
	// needed. On a Cluster, commands without keys are never mixed with
	// keyed ones of several slots.
	DoMulti DoMultiFunc[C]

	// Dedicated, optional, calls fn with a DoMultiFunc bound to one
	// connection that nobody else uses meanwhile (on a Cluster, one to the
	// node serving the slot of the first keyed command), and gives the
	// connection back when fn returns; it takes no context, so the driver
	// runs it on a goroutine of its own that Run may leave at its context's
	// end. Calls that ask for WAIT go through it, one Dedicated per hash
	// tag on a Cluster. Nil when every DoMulti keeps its commands in order
	// on one connection, as go-redis's pipelines do: a WAIT then follows
	// its script in the same DoMulti.
	Dedicated func(fn func(doMulti DoMultiFunc[C]))
	// Replicated, optional, sends the calls that ask for WAIT in place of
	// the above, each script followed by its WAIT (Driver.Pipeline does
	// that for one connection). go-redis on a Cluster routes them to each
	// key's master and follows redirections.
	Replicated func(ctx context.Context, calls []*driver.Call)
	// Sent, optional, is called after a sending in which some call failed:
	// ran[i] is how often calls[i]'s script may have run (see
	// Result.Writes), and shared tells a pipeline that the batcher sent for
	// several callers, on a context of its own.
	Sent func(ctx context.Context, calls []*driver.Call, ran []int32, shared bool)

	// Cluster reports whether the client is a Cluster client, whose
	// connections each serve some slots only.
	Cluster bool
	// Combine, for a library that does not pipeline concurrent callers'
	// commands by itself (go-redis; rueidis and valkey-go do), makes a Run
	// that finds others in flight join a shared pipeline (batch.go).
	Combine bool
	// Ends says what ends a call besides its reply (dispatch.go).
	Ends Ends
	// SharedDial, for rueidis and valkey-go, says that the library dials
	// a shared connection with the context of the call that needed it
	// first, and fails every call waiting for it when that context ends:
	// such a call is sent again (run.go).
	SharedDial bool

	// Scan builds SCAN cursor MATCH match COUNT count, and Role builds
	// ROLE, for Driver.Scan.
	Scan func(cursor uint64, match string, count int64) C
	Role func() C
	// Nodes returns the nodes of a Cluster that the client knows, masters
	// and replicas alike: Driver.Scan asks each for its ROLE and lists the
	// keys of the masters. It is used only when Cluster is true; elsewhere
	// Scan goes through Do, which reaches the master.
	Nodes func(ctx context.Context) ([]Node[C], error)

	// PubSub is how the driver's subscriptions connect.
	PubSub PubSub
}

// Node is one server of a Cluster, as Lib.Nodes lists it.
type Node[C any] struct {
	// Addr is the node's address, for error messages.
	Addr string
	// Do sends one command to this node.
	Do func(ctx context.Context, cmd C) Result
}

// Driver is a driver.Driver over a Lib. It is safe for concurrent use.
type Driver[C any] struct {
	lib     Lib[C]
	workers *workers.Pool // runs calls Run may leave, and batch helpers; Close waits for them
	active  atomic.Int32  // Dispatch calls in progress, and TryAlone holders
	batch   batcher
	sendFn  func(context.Context, []*driver.Call) // send, bound once: a method value allocates
	scratch scratchPool[C]                        // Pipeline's lists
}

// New returns a Driver over lib.
func New[C any](lib Lib[C]) *Driver[C] {
	d := &Driver[C]{lib: lib, workers: workers.New()}
	d.sendFn = d.send
	d.batch.run = d.sendShared
	d.batch.workers = d.workers
	return d
}

var (
	_ driver.Driver  = (*Driver[int])(nil)
	_ driver.Sharded = (*Driver[int])(nil)
	_ driver.Scanner = (*Driver[int])(nil)
)

// Close waits for the calls that Run stopped waiting for at its context's
// end (they finish within the library's timeouts); afterwards Run no
// longer leaves any behind. dlock.Client.Close calls it. It neither closes
// the library's client nor stops subscriptions, and always returns nil.
func (d *Driver[C]) Close() error {
	d.batch.close()   // no more batch helpers
	d.workers.Close() // waits for them and for abandoned calls
	return nil
}

// Sharded implements driver.Sharded: true for a Cluster client, so that
// dlock never puts keys of several slots into one script.
func (d *Driver[C]) Sharded() bool { return d.lib.Cluster }

// Go runs task on one of the driver's goroutines, which Close waits for;
// after Close, in the caller.
func (d *Driver[C]) Go(task func()) { d.workers.Go(task) }

// TryAlone reports whether no Run is in progress and, if so, counts the
// caller as one until it calls EndAlone, so that a caller with a faster
// path for a lone call (go-redis's SetNX) takes it only then.
func (d *Driver[C]) TryAlone() bool {
	if d.active.Add(1) > 1 {
		d.active.Add(-1)
		return false
	}
	return true
}

// EndAlone ends what a successful TryAlone began.
func (d *Driver[C]) EndAlone() { d.active.Add(-1) }

// InFlight returns how many Runs are in progress, TryAlone holders
// included: for tests, which wait for a call to be on its way.
func (d *Driver[C]) InFlight() int { return int(d.active.Load()) }

// Idle reports whether no Run is in progress and the batcher holds no
// sending slot and queues nothing: for tests, which check that a burst of
// calls leaves nothing behind.
func (d *Driver[C]) Idle() bool { return d.active.Load() == 0 && d.batch.idle() }
