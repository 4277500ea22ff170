package goredis

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/driverkit"
)

// SetNX tries to take key for value with a native SET key value NX PX px,
// before c, a script call whose fast path does the same, is sent. It
// reports whether it settled c: the key was set (c.Reply is int64(1)), or
// the SET failed (c.Err, as Run reports failures; a transport failure may
// have set the key all the same). It settles nothing, and the caller runs
// c as usual, when the key exists (c's script then decides: it may be the
// caller's own from an earlier sending), when other calls are in flight
// (they go out in shared pipelines, which serve load better), or
// on a Cluster (whose failover handling is the script path's).
//
// A native SET spares the server a script's fixed cost, a large share of
// Redlock's per-node work (bench/levers.md).
//
// Like RunToReply, it waits for the reply in the caller, whatever ctx's
// deadline: the Redlock fan-out that calls it has a timer of its own.
func (d *Driver) SetNX(ctx context.Context, c *driver.Call, key, value string, px time.Duration) (settled bool) {
	if d.cc != nil {
		return false
	}
	if !d.kit.TryAlone() {
		return false
	}
	defer d.kit.EndAlone()
	v := countedArg{b: []byte(value)}
	res, err := d.rdb.Do(ctx, "set", key, &v, "nx", "px", px.Milliseconds()).Result()
	if errors.Is(err, redis.Nil) {
		return false
	}
	c.Reply, c.Err = normalize(res, err)
	if c.Err == nil {
		c.Reply = int64(1)
	}
	c.Resent = driverkit.MayHaveRun(v.writes.Load(), c.Err) > 1
	return true
}
