// Package goredis implements dlock's driver.Driver on github.com/redis/go-redis/v9.
//
// The engine is internal/driverkit's: batching, EVALSHA then EVAL, WAIT
// after its script, returning at a context's end, the subscriptions and
// SCAN. This package supplies go-redis's commands (lib.go, args.go) and
// what only go-redis needs: reading its clients' timeouts (deadline.go),
// counting a command's writes (args.go), WAIT routed to each key's master
// on a Cluster and redirections followed (cluster.go), TRYAGAIN retried
// (tryagain.go), the slot map reloaded after a Cluster failover
// (failover.go), sharded pub/sub chosen and its connections read
// (pubsub.go), and a native SET for a free key (setnx.go).
package goredis

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/driverkit"
)

// Client is the part of a go-redis v9 client the driver uses. *redis.Client,
// *redis.ClusterClient and the failover client implement it.
type Client interface {
	Do(ctx context.Context, args ...interface{}) *redis.Cmd
	Pipeline() redis.Pipeliner
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Driver runs dlock's scripts and subscription on a go-redis client.
type Driver struct {
	rdb    Client
	kit    *driverkit.Driver[*argv]
	routed bool                 // rdb picks a node by the first key (args.go)
	read   time.Duration        // the client's read timeout; 0 for none or unknown (deadline.go)
	cc     *redis.ClusterClient // rdb, when it is a Cluster client
	pubsub pubsubKind           // Cluster: sharded pub/sub or not (pubsub.go)
	slots  slotReloader         // Cluster: reloads of the slot map after failures (failover.go)
}

var (
	_ driver.Driver         = (*Driver)(nil)
	_ driver.Sharded        = (*Driver)(nil)
	_ driver.Scanner        = (*Driver)(nil)
	_ driver.ReplyTimeouter = (*Driver)(nil)
)

// New returns a Driver over rdb.
func New(rdb Client) *Driver {
	_, single := rdb.(*redis.Client)
	d := &Driver{rdb: rdb, routed: !single}
	d.cc, _ = rdb.(*redis.ClusterClient)
	var ends driverkit.Ends
	ends, d.read = clientTimeouts(rdb)
	d.kit = driverkit.New(d.lib(ends))
	return d
}

// Close waits for commands that Run stopped waiting for at their deadline;
// afterwards such calls run in their caller. It does not close the go-redis
// client, which the caller owns.
func (d *Driver) Close() error { return d.kit.Close() }

// Sharded implements driver.Sharded: true for a Cluster client.
func (d *Driver) Sharded() bool { return d.kit.Sharded() }

// PublishCommand implements driver.Driver: SPUBLISH on a Cluster whose
// servers have sharded pub/sub (Redis 7.0 and later), PUBLISH otherwise
// (see pubsub.go).
func (d *Driver) PublishCommand() string { return d.kit.PublishCommand() }

// Subscribe implements driver.Driver: SSUBSCRIBE at each channel's master
// on a Cluster whose servers have sharded pub/sub, SUBSCRIBE on one
// connection elsewhere (pubsub.go).
func (d *Driver) Subscribe(h driver.Handler) driver.Subscription { return d.kit.Subscribe(h) }

// Scan implements driver.Scanner.
func (d *Driver) Scan(ctx context.Context, match string, each func(key string) bool) error {
	return d.kit.Scan(ctx, match, each)
}

// ReplyTimeout implements driver.ReplyTimeouter: go-redis's ReadTimeout for
// the clients whose options dlock reads (clientTimeouts; a Sentinel-managed
// master's client is a *redis.Client too), zero for wrappers and for no
// limit.
func (d *Driver) ReplyTimeout() time.Duration { return d.read }

// Run implements driver.Driver.
func (d *Driver) Run(ctx context.Context, calls ...*driver.Call) {
	d.run(ctx, calls, d.kit.LeaveEarly(ctx))
}

// RunToReply is Run for a caller that stops waiting by itself, such as a
// worker of a fan-out to several nodes that has a timer of its own: it
// waits for the replies in the caller even when ctx has a deadline that
// go-redis does not enforce, instead of handing the calls to a goroutine
// so as to return at the deadline (driverkit.Driver.Dispatch). go-redis
// then ends such calls at its read timeout, or at once if ctx has ended
// before they got a connection; ctx bounds the whole call when the client
// enforces context deadlines.
func (d *Driver) RunToReply(ctx context.Context, calls ...*driver.Call) {
	d.run(ctx, calls, false)
}

func (d *Driver) run(ctx context.Context, calls []*driver.Call, leave bool) {
	d.kit.Dispatch(ctx, calls, leave)
	if d.routed {
		d.retryTryAgain(ctx, calls, leave)
	}
}
