package goredis

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/driverkit"
)

// lib is the driverkit.Lib of go-redis: commands are command lines from a
// pool (args.go), sent with Do or in a Pipeline, which go-redis splits per
// node on a Cluster and otherwise sends on one connection, in order, so a
// WAIT follows its script there. go-redis does not pipeline concurrent
// callers by itself: the engine's batcher does (Combine).
func (d *Driver) lib(ends driverkit.Ends) driverkit.Lib[*argv] {
	routed := d.routed
	lib := driverkit.Lib[*argv]{
		EvalSha: func(c *driver.Call) *argv { return getArgv().eval(c, false, routed) },
		Eval:    func(c *driver.Call) *argv { return getArgv().eval(c, true, routed) },
		Wait:    func(c *driver.Call) *argv { return getArgv().wait(c) },
		Release: putArgv,
		Do:      func(ctx context.Context, a *argv) driverkit.Result { return do(ctx, d.rdb, a) },
		DoMulti: func(ctx context.Context, cmds []*argv, out []driverkit.Result) {
			doMulti(ctx, d.rdb.Pipeline(), false, cmds, out)
		},
		Sent:    d.sent,
		Cluster: d.cc != nil,
		Combine: true,
		Ends:    ends,
		Scan: func(cursor uint64, match string, count int64) *argv {
			return getArgv().line("scan", cursor, "match", match, "count", count)
		},
		Role:   func() *argv { return getArgv().line("role") },
		Nodes:  d.nodes,
		PubSub: d.pubsubLib(),
	}
	if d.cc != nil {
		lib.Replicated = d.runOnMasters
	}
	return lib
}

// do sends a with one of go-redis's Do methods.
func do(ctx context.Context, rdb interface {
	Do(ctx context.Context, args ...interface{}) *redis.Cmd
}, a *argv) driverkit.Result {
	res, err := rdb.Do(ctx, a.args...).Result()
	reply, err := normalize(res, err)
	return driverkit.Result{Reply: reply, Err: err, Writes: a.script.writes.Load()}
}

// doMulti sends cmds in pipe, each script preceded by ASKING when asking
// (a node importing the slot), and stores their results in out.
func doMulti(ctx context.Context, pipe redis.Pipeliner, asking bool, cmds []*argv, out []driverkit.Result) {
	rcs := getCmds(len(cmds))
	for i, a := range cmds {
		if asking && a.script.b != nil {
			pipe.Do(ctx, "asking")
		}
		(*rcs)[i] = pipe.Do(ctx, a.args...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for i, a := range cmds {
		res, err := (*rcs)[i].Result()
		out[i].Reply, out[i].Err = normalize(res, err)
		out[i].Writes = a.script.writes.Load()
	}
	putCmds(rcs)
}

// cmdsPool holds doMulti's lists of go-redis commands.
var cmdsPool = sync.Pool{New: func() any { return new([]*redis.Cmd) }}

func getCmds(n int) *[]*redis.Cmd {
	p := cmdsPool.Get().(*[]*redis.Cmd)
	if cap(*p) < n {
		*p = make([]*redis.Cmd, n)
	}
	*p = (*p)[:n]
	return p
}

func putCmds(p *[]*redis.Cmd) {
	clear(*p)
	cmdsPool.Put(p)
}

// normalize turns go-redis results into the driver's conventions: a nil
// reply is not an error, and server error replies are *driver.ReplyError.
func normalize(res any, err error) (any, error) {
	if err == nil {
		return res, nil
	}
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if errors.Is(err, redis.ErrClosed) {
		return nil, fmt.Errorf("%w: %w", driver.ErrClientClosed, err)
	}
	if isServerError(err) {
		return nil, &driver.ReplyError{Msg: err.Error(), Err: err}
	}
	return nil, err
}

// isServerError reports whether err is an error reply of the server.
func isServerError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && !isNetworkError(err)
}

// isNetworkError reports whether err comes from the connection rather than
// from the server: go-redis marks a few of its own errors with RedisError too.
func isNetworkError(err error) bool {
	var nerr interface{ Timeout() bool }
	return errors.As(err, &nerr)
}

// nodes is Lib.Nodes: every node of the Cluster, masters and replicas, as
// the client knows them after reloading the Cluster's state
// (ForEachShard reloads it first).
func (d *Driver) nodes(ctx context.Context) ([]driverkit.Node[*argv], error) {
	var (
		mu    sync.Mutex
		nodes []driverkit.Node[*argv]
	)
	err := d.cc.ForEachShard(ctx, func(_ context.Context, node *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, driverkit.Node[*argv]{
			Addr: node.Options().Addr,
			Do:   func(ctx context.Context, a *argv) driverkit.Result { return do(ctx, node, a) },
		})
		return nil
	})
	return nodes, err
}
