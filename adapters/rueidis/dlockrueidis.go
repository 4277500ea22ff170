// Package dlockrueidis runs dlock over github.com/redis/rueidis:
//
//	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"localhost:6379"}})
//	...
//	c, err := dlockrueidis.New(client)
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
// How the driver uses rueidis:
//
//   - Scripts go out as EVALSHA, and again as EVAL for the calls the server
//     answers NOSCRIPT (after SCRIPT FLUSH, a restart or a failover). A lone
//     call uses Client.Do; several are pipelined with Client.DoMulti, which
//     splits them across a Cluster's nodes.
//   - A call that asks for WAIT (driver.Call.Replicas) must have it on the
//     connection that ran the script, but rueidis multiplexes everyone's
//     commands over shared connections. Such calls therefore run inside
//     Client.Dedicated, one DoMulti of each script followed by its WAIT on a
//     pooled connection that nobody else uses meanwhile; on a Cluster one
//     dedicated connection per hash tag, pinned by rueidis to the node of
//     the script's first key.
//     rueidis takes that connection from its pool without a context, so the
//     driver runs such a batch in a goroutine of its own and Run still
//     returns at ctx's deadline; dlock's Client.Close waits for a batch
//     left behind that way (it ends within the dial timeout).
//   - Pub/sub uses a connection of its own from Client.Dedicate, with
//     SetPubSubHooks delivering messages and subscription confirmations.
//     rueidis pings it in the background and closes it when the server
//     stops answering; the driver then dials a new one, subscribes to every
//     channel again, and tells dlock to re-check its waiters (messages sent
//     in between are lost). Closing the Client cancels a SUBSCRIBE in
//     flight and stops the driver's goroutine at once, even when the server
//     stopped answering; a dial that rueidis is still making (Dedicate takes
//     no context) or a close it is still finishing goes on in a goroutine
//     of the driver's, which ends with it and closes the connection.
//   - Client.List sends SCAN with MATCH and COUNT, cursor after cursor,
//     through Client.Do; on a Cluster, concurrently to every node of
//     Client.Nodes that answers ROLE as a master.
//   - rueidis dials a shared connection, and sends its handshake, with the
//     context of the call that needed it first, and fails every call
//     waiting for that connection when that context ends. A call that
//     fails that way while its own context is live was never sent, so the
//     driver sends it again (up to ten times) instead of passing another
//     caller's cancellation on to it.
//   - Replies are normalized to int64, string, nil and []any; error replies
//     become *driver.ReplyError. rueidis drops a leading "ERR " from error
//     messages; other codes (WRONGTYPE, NOSCRIPT, ...) are kept.
//
// The module requires rueidis v1.0.69, the newest release that needs no
// more than Go 1.23 (v1.0.70 and later need Go 1.24 or 1.25). Newer rueidis
// releases work too: your go.mod's requirement wins by minimal version
// selection.
package dlockrueidis

import (
	"context"
	"fmt"
	"slices"

	"github.com/redis/rueidis"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/driverkit"
)

// New returns a dlock.Client over client, a rueidis client for a
// standalone server, a Sentinel-managed master or a Cluster. opts set the
// defaults of every lock, as for dlock.New. It returns an error matching
// dlock.ErrInvalidArgument for a nil client or an invalid option, and sends
// nothing to Redis.
//
// The Client does not own client: close the Client first, then client.
func New(client rueidis.Client, opts ...dlock.Option) (*dlock.Client, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: dlockrueidis.New: nil rueidis client", dlock.ErrInvalidArgument)
	}
	return dlock.NewWithDriver(NewDriver(client), opts...)
}

// NewDriver returns the driver.Driver that New uses, for
// dlock.NewWithDriver. client must not be nil. The driver is safe for
// concurrent use; it does not own client and never closes it.
func NewDriver(client rueidis.Client) driver.Driver {
	return driverkit.New(driverkit.Lib[rueidis.Completed]{
		EvalSha: func(c *driver.Call) rueidis.Completed {
			return client.B().Evalsha().Sha1(c.Script.Hash()).Numkeys(int64(len(c.Keys))).
				Key(c.Keys...).Arg(driverkit.Args(c.Args)...).Build()
		},
		Eval: func(c *driver.Call) rueidis.Completed {
			return client.B().Eval().Script(c.Script.Source()).Numkeys(int64(len(c.Keys))).
				Key(c.Keys...).Arg(driverkit.Args(c.Args)...).Build()
		},
		Wait: func(c *driver.Call) rueidis.Completed {
			return client.B().Wait().Numreplicas(int64(c.Replicas)).Timeout(c.ReplicaTimeout.Milliseconds()).Build()
		},
		Do: func(ctx context.Context, cmd rueidis.Completed) driverkit.Result {
			return result(client.Do(ctx, cmd))
		},
		DoMulti: func(ctx context.Context, cmds []rueidis.Completed, out []driverkit.Result) {
			// A copy: the driver reuses its list once DoMulti returns.
			results(client.DoMulti(ctx, slices.Clone(cmds)...), out)
		},
		Dedicated: func(fn func(driverkit.DoMultiFunc[rueidis.Completed])) {
			_ = client.Dedicated(func(dc rueidis.DedicatedClient) error {
				fn(func(ctx context.Context, cmds []rueidis.Completed, out []driverkit.Result) {
					results(dc.DoMulti(ctx, slices.Clone(cmds)...), out)
				})
				return nil
			})
		},
		Cluster: client.Mode() == rueidis.ClientModeCluster,
		// The library ends a call when its context ends, and dials shared
		// connections with the first caller's context.
		Ends:       driverkit.Ends{Deadline: true, Timeouts: true},
		SharedDial: true,
		Scan: func(cursor uint64, match string, count int64) rueidis.Completed {
			return client.B().Scan().Cursor(cursor).Match(match).Count(count).Build()
		},
		Role: func() rueidis.Completed { return client.B().Role().Build() },
		// A node's client shares client's command builder, so the commands
		// above go to any node.
		Nodes: func(context.Context) ([]driverkit.Node[rueidis.Completed], error) {
			var nodes []driverkit.Node[rueidis.Completed]
			for addr, n := range client.Nodes() {
				nodes = append(nodes, driverkit.Node[rueidis.Completed]{
					Addr: addr,
					Do: func(ctx context.Context, cmd rueidis.Completed) driverkit.Result {
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
			lost := dc.SetPubSubHooks(rueidis.PubSubHooks{
				OnMessage:      func(m rueidis.PubSubMessage) { h.Message(m.Channel, m.Message) },
				OnSubscription: func(s rueidis.PubSubSubscription) { h.Subscription(s.Kind, s.Channel) },
			})
			return driverkit.DedicatedPubSub(dc.Do,
				func(chs ...string) rueidis.Completed { return dc.B().Subscribe().Channel(chs...).Build() },
				func(chs ...string) rueidis.Completed { return dc.B().Unsubscribe().Channel(chs...).Build() },
				// Success is an empty message, which ToAny cannot read.
				func(r rueidis.RedisResult) error { return serverErr(r.Error()) },
				lost, dc.Close)
		}},
	})
}

// result converts a rueidis result to the driver conventions.
func result(r rueidis.RedisResult) driverkit.Result {
	v, err := r.ToAny()
	switch {
	case err == nil:
		return driverkit.Result{Reply: driverkit.Normalize(v)}
	case rueidis.IsRedisNil(err):
		return driverkit.Result{}
	}
	return driverkit.Result{Err: serverErr(err)}
}

// serverErr makes an error reply a *driver.ReplyError.
func serverErr(err error) error {
	if rerr, ok := rueidis.IsRedisErr(err); ok {
		return driverkit.ServerError(rerr)
	}
	return err
}

func results(rs []rueidis.RedisResult, out []driverkit.Result) {
	for i, r := range rs {
		out[i] = result(r)
	}
}
