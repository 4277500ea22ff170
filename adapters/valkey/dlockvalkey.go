// Package dlockvalkey runs dlock over github.com/valkey-io/valkey-go, the
// Valkey project's client (a fork of rueidis), against Valkey or Redis:
//
//	client, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{"localhost:6379"}})
//	...
//	c, err := dlockvalkey.New(client)
//	...
//	defer c.Close()
//	lease, err := c.Mutex("orders:1001").Lock(ctx)
//
// The Client is a dlock.Client with the same guarantees as one from
// dlock.New over go-redis: its primitives, leases and their fencing tokens
// (Lease.Token), Inspect, List and ForceUnlock work the same, and the same
// conformance suite runs over both, against standalone servers and a
// Cluster. A Sentinel client takes the standalone path (one master at a
// time, which the client follows through failovers); it is not tested here.
// Two parts of dlock take go-redis clients, so a program that uses them
// needs one as well: Redlock (dlock.NewRedlock takes []dlock.RedisClient)
// and the fence package's Store (fence.New takes a go-redis
// redis.Scripter), which accepts the tokens of this Client's leases like
// any others.
//
// How the driver uses valkey-go:
//
//   - Scripts go out as EVALSHA, and again as EVAL for the calls the server
//     answers NOSCRIPT (after SCRIPT FLUSH, a restart or a failover). A lone
//     call uses Client.Do; several are pipelined with Client.DoMulti, which
//     splits them across a Cluster's nodes.
//   - A call that asks for WAIT (driver.Call.Replicas) must have it on the
//     connection that ran the script, but valkey-go multiplexes everyone's
//     commands over shared connections. Such calls therefore run inside
//     Client.Dedicated, one DoMulti of each script followed by its WAIT on a
//     pooled connection that nobody else uses meanwhile; on a Cluster one
//     dedicated connection per hash tag, pinned by valkey-go to the node of
//     the script's first key.
//     valkey-go takes that connection from its pool without a context, so the
//     driver runs such a batch in a goroutine of its own and Run still
//     returns at ctx's deadline; dlock's Client.Close waits for a batch
//     left behind that way (it ends within the dial timeout).
//   - Pub/sub uses a connection of its own from Client.Dedicate, with
//     SetPubSubHooks delivering messages and subscription confirmations.
//     valkey-go pings it in the background and closes it when the server
//     stops answering; the driver then dials a new one, subscribes to every
//     channel again, and tells dlock to re-check its waiters (messages sent
//     in between are lost). Closing the Client cancels a SUBSCRIBE in
//     flight and stops the driver's goroutine at once, even when the server
//     stopped answering; a dial that valkey-go is still making (Dedicate
//     takes no context) or a close it is still finishing goes on in a
//     goroutine of the driver's, which ends with it and closes the
//     connection.
//   - Client.List sends SCAN with MATCH and COUNT, cursor after cursor,
//     through Client.Do; on a Cluster, concurrently to every node of
//     Client.Nodes that answers ROLE as a master.
//   - valkey-go dials a shared connection, and sends its handshake, with the
//     context of the call that needed it first, and fails every call
//     waiting for that connection when that context ends. A call that
//     fails that way while its own context is live was never sent, so the
//     driver sends it again (up to ten times) instead of passing another
//     caller's cancellation on to it.
//   - Replies are normalized to int64, string, nil and []any; error replies
//     become *driver.ReplyError. valkey-go drops a leading "ERR " from error
//     messages; other codes (WRONGTYPE, NOSCRIPT, ...) are kept.
//
// The module requires valkey-go v1.0.69, the newest release that needs no
// more than Go 1.23 (v1.0.70 and later need Go 1.24 or 1.25). Newer
// valkey-go releases work too: your go.mod's requirement wins by minimal
// version selection.
package dlockvalkey

import (
	"context"
	"fmt"
	"slices"

	"github.com/valkey-io/valkey-go"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/driverkit"
)

// New returns a dlock.Client over client, a valkey-go client for a
// standalone server, a Sentinel-managed master or a Cluster. opts set the
// defaults of every lock, as for dlock.New. It returns an error matching
// dlock.ErrInvalidArgument for a nil client or an invalid option, and sends
// nothing to Redis.
//
// The Client does not own client: close the Client first, then client.
func New(client valkey.Client, opts ...dlock.Option) (*dlock.Client, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: dlockvalkey.New: nil valkey client", dlock.ErrInvalidArgument)
	}
	return dlock.NewWithDriver(NewDriver(client), opts...)
}

// NewDriver returns the driver.Driver that New uses, for
// dlock.NewWithDriver. client must not be nil. The driver is safe for
// concurrent use; it does not own client and never closes it.
func NewDriver(client valkey.Client) driver.Driver {
	return driverkit.New(driverkit.Lib[valkey.Completed]{
		EvalSha: func(c *driver.Call) valkey.Completed {
			return client.B().Evalsha().Sha1(c.Script.Hash()).Numkeys(int64(len(c.Keys))).
				Key(c.Keys...).Arg(driverkit.Args(c.Args)...).Build()
		},
		Eval: func(c *driver.Call) valkey.Completed {
			return client.B().Eval().Script(c.Script.Source()).Numkeys(int64(len(c.Keys))).
				Key(c.Keys...).Arg(driverkit.Args(c.Args)...).Build()
		},
		Wait: func(c *driver.Call) valkey.Completed {
			return client.B().Wait().Numreplicas(int64(c.Replicas)).Timeout(c.ReplicaTimeout.Milliseconds()).Build()
		},
		Do: func(ctx context.Context, cmd valkey.Completed) driverkit.Result {
			return result(client.Do(ctx, cmd))
		},
		DoMulti: func(ctx context.Context, cmds []valkey.Completed, out []driverkit.Result) {
			// A copy: the driver reuses its list once DoMulti returns.
			results(client.DoMulti(ctx, slices.Clone(cmds)...), out)
		},
		Dedicated: func(fn func(driverkit.DoMultiFunc[valkey.Completed])) {
			_ = client.Dedicated(func(dc valkey.DedicatedClient) error {
				fn(func(ctx context.Context, cmds []valkey.Completed, out []driverkit.Result) {
					results(dc.DoMulti(ctx, slices.Clone(cmds)...), out)
				})
				return nil
			})
		},
		Cluster: client.Mode() == valkey.ClientModeCluster,
		// The library ends a call when its context ends, and dials shared
		// connections with the first caller's context.
		Ends:       driverkit.Ends{Deadline: true, Timeouts: true},
		SharedDial: true,
		Scan: func(cursor uint64, match string, count int64) valkey.Completed {
			return client.B().Scan().Cursor(cursor).Match(match).Count(count).Build()
		},
		Role: func() valkey.Completed { return client.B().Role().Build() },
		// A node's client shares client's command builder, so the commands
		// above go to any node.
		Nodes: func(context.Context) ([]driverkit.Node[valkey.Completed], error) {
			var nodes []driverkit.Node[valkey.Completed]
			for addr, n := range client.Nodes() {
				nodes = append(nodes, driverkit.Node[valkey.Completed]{
					Addr: addr,
					Do: func(ctx context.Context, cmd valkey.Completed) driverkit.Result {
						return result(n.Do(ctx, cmd))
					},
				})
			}
			return nodes, nil
		},
		PubSub: driverkit.PubSub{Dial: func(h driverkit.Hooks) driverkit.PubSubConn {
			// A connection out of client's pool of dedicated ones, which
			// leaves the pool for good (closing it releases it); on a
			// Cluster it connects to some node on its first command, and
			// PUBLISH reaches every node.
			dc, _ := client.Dedicate()
			lost := dc.SetPubSubHooks(valkey.PubSubHooks{
				OnMessage:      func(m valkey.PubSubMessage) { h.Message(m.Channel, m.Message) },
				OnSubscription: func(s valkey.PubSubSubscription) { h.Subscription(s.Kind, s.Channel) },
			})
			return driverkit.DedicatedPubSub(dc.Do,
				func(chs ...string) valkey.Completed { return dc.B().Subscribe().Channel(chs...).Build() },
				func(chs ...string) valkey.Completed { return dc.B().Unsubscribe().Channel(chs...).Build() },
				// Success is an empty message, which ToAny cannot read.
				func(r valkey.ValkeyResult) error { return serverErr(r.Error()) },
				lost, dc.Close)
		}},
	})
}

// result converts a valkey-go result to the driver conventions.
func result(r valkey.ValkeyResult) driverkit.Result {
	v, err := r.ToAny()
	switch {
	case err == nil:
		return driverkit.Result{Reply: driverkit.Normalize(v)}
	case valkey.IsValkeyNil(err):
		return driverkit.Result{}
	}
	return driverkit.Result{Err: serverErr(err)}
}

// serverErr makes an error reply a *driver.ReplyError.
func serverErr(err error) error {
	if rerr, ok := valkey.IsValkeyErr(err); ok {
		return driverkit.ServerError(rerr)
	}
	return err
}

func results(rs []valkey.ValkeyResult, out []driverkit.Result) {
	for i, r := range rs {
		out[i] = result(r)
	}
}
