// Package driverkit is the client-independent part of dlock's drivers for
// github.com/redis/rueidis and its fork github.com/valkey-io/valkey-go
// (adapters/rueidis, adapters/valkey): how calls are batched, when EVAL
// replaces EVALSHA, how WAIT stays on the script's connection, how replies
// are normalized, the reconnecting pub/sub subscription, and the SCAN of
// every master that dlock's Client.List needs. An adapter supplies a Lib, a
// handful of functions that build and send its library's commands, so
// neither adapter module depends on the other library and the two share one
// implementation of everything that could go subtly wrong.
//
// The adapter modules import this package through the root module, so an
// adapter release must require a root module version with a compatible
// driverkit; both live in this repository and are released together.
package driverkit

import (
	"context"

	"github.com/dlock-go/dlock/driver"
)

// Result is one command's outcome under the driver conventions: Reply is
// nil, int64, string or []any of those, and Err is nil, a *driver.ReplyError
// for an error reply, or the library's transport error. A nil reply is not
// an error.
type Result struct {
	Reply any
	Err   error
}

// DoMultiFunc sends cmds, pipelined, and returns their results in order.
type DoMultiFunc[C any] func(ctx context.Context, cmds ...C) []Result

// Lib is what the driver needs from a client library whose commands have
// type C. Every field is required. A Lib's functions must be safe for
// concurrent use.
type Lib[C any] struct {
	// EvalSha, Eval and Wait build the EVALSHA, EVAL and WAIT commands of a
	// call. Commands are built anew for every send (rueidis recycles a
	// command once it was sent).
	EvalSha func(c *driver.Call) C
	Eval    func(c *driver.Call) C
	Wait    func(c *driver.Call) C

	// Do sends one command.
	Do func(ctx context.Context, cmd C) Result
	// DoMulti sends commands pipelined, split across a Cluster's nodes as
	// needed. On a Cluster, commands without keys must not be mixed with
	// keyed ones of several slots; the driver never does.
	DoMulti DoMultiFunc[C]
	// Dedicated calls fn with a DoMultiFunc bound to one connection that
	// nobody else uses meanwhile (on a Cluster, one to the node serving the
	// slot of the first keyed command), and gives the connection back when
	// fn returns. Every command fn sends goes to the same slot.
	Dedicated func(fn func(doMulti DoMultiFunc[C]))

	// Cluster reports whether the client is a Cluster client, whose
	// connections each serve some slots only.
	Cluster bool

	// Scan builds SCAN cursor MATCH match COUNT count, and Role builds
	// ROLE, for Driver.Scan.
	Scan func(cursor uint64, match string, count int64) C
	Role func() C
	// Nodes returns the nodes of a Cluster that the client knows, masters
	// and replicas alike: Driver.Scan asks each for its ROLE and lists the
	// keys of the masters. It is used only when Cluster is true; elsewhere
	// Scan goes through Do, which reaches the master.
	Nodes func() []Node[C]

	// Dial opens a new dedicated connection for pub/sub whose messages and
	// subscription confirmations go to h. It does not fail: a connection
	// that cannot be made reports it through PubSubConn.Lost. It may block
	// for the library's dial timeout (rueidis's Dedicate takes no context):
	// the subscription calls it from a goroutine that Close does not wait
	// for.
	Dial func(h Hooks) PubSubConn
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
	lib Lib[C]
	bg  background
}

// New returns a Driver over lib.
func New[C any](lib Lib[C]) *Driver[C] {
	return &Driver[C]{lib: lib}
}

var (
	_ driver.Driver  = (*Driver[int])(nil)
	_ driver.Sharded = (*Driver[int])(nil)
	_ driver.Scanner = (*Driver[int])(nil)
)

// Close waits for the commands that Run stopped waiting for when its
// context ended (they finish within the library's dial timeout); Run called
// afterwards no longer leaves any behind. dlock.Client.Close calls it. It
// neither closes the library's client nor stops subscriptions, and always
// returns nil.
func (d *Driver[C]) Close() error {
	d.bg.wait()
	return nil
}

// Sharded implements driver.Sharded: true for a Cluster client, so that
// dlock never puts keys of several slots into one script.
func (d *Driver[C]) Sharded() bool { return d.lib.Cluster }

// PublishCommand implements driver.Driver.
//
// Plain PUBLISH reaches a subscriber connected to any node, Cluster included
// (where the message is broadcast over the cluster bus), so the subscription
// may use any node.
func (d *Driver[C]) PublishCommand() string { return "PUBLISH" }

// Subscribe implements driver.Driver. The subscription connects on its
// first Subscribe, through Lib.Dial.
func (d *Driver[C]) Subscribe(h driver.Handler) driver.Subscription {
	return newSubscription(d.lib.Dial, h)
}
