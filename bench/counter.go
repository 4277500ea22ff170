package bench

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// Counter counts, on the client side, the commands a library sends and the
// round trips it takes: a single command is one round trip, a pipeline of n
// commands is n commands and one round trip. Redis's own counters
// (commandstats) also count the commands that scripts run inside, so the two
// views together tell scripts from chatter. Subscriptions are not counted
// here (they do not go through the hooks); commandstats shows them.
type Counter struct {
	cmds, trips atomic.Int64
}

// CounterSnapshot is a Counter's totals at one moment.
type CounterSnapshot struct {
	Commands, RoundTrips int64
}

// Snapshot returns the current totals.
func (c *Counter) Snapshot() CounterSnapshot {
	return CounterSnapshot{Commands: c.cmds.Load(), RoundTrips: c.trips.Load()}
}

// Sub returns s − o.
func (s CounterSnapshot) Sub(o CounterSnapshot) CounterSnapshot {
	return CounterSnapshot{Commands: s.Commands - o.Commands, RoundTrips: s.RoundTrips - o.RoundTrips}
}

func (c *Counter) add(cmds int) {
	if c == nil {
		return
	}
	c.cmds.Add(int64(cmds))
	c.trips.Add(1)
}

// goredisHook counts through go-redis's hooks.
type goredisHook struct{ c *Counter }

var _ redis.Hook = goredisHook{}

func (h goredisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h goredisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.c.add(1)
		return next(ctx, cmd)
	}
}

func (h goredisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.c.add(len(cmds))
		return next(ctx, cmds)
	}
}

// newGoredis returns a go-redis client for addr with go-redis's default
// options, counting into c when c is set.
func newGoredis(addr string, c *Counter) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if c != nil {
		rdb.AddHook(goredisHook{c})
	}
	return rdb
}

// countingRueidis counts what rueidislock sends through its rueidis client.
type countingRueidis struct {
	rueidis.Client
	c *Counter
}

func (r countingRueidis) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	r.c.add(1)
	return r.Client.Do(ctx, cmd)
}

func (r countingRueidis) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	r.c.add(len(multi))
	return r.Client.DoMulti(ctx, multi...)
}

func (r countingRueidis) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	r.c.add(1)
	return r.Client.DoCache(ctx, cmd, ttl)
}

func (r countingRueidis) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	r.c.add(len(multi))
	return r.Client.DoMultiCache(ctx, multi...)
}
