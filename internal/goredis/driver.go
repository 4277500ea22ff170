// Package goredis implements dlock's driver.Driver on github.com/redis/go-redis/v9.
package goredis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/workers"
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
	rdb     Client
	io      timeouts      // what ends a call besides its reply (deadline.go)
	routed  bool          // rdb picks a node by the first key (args.go)
	workers *workers.Pool // goroutines for calls that may be left early (deadline.go, batch.go)
	active  atomic.Int32  // Run calls in progress
	batch   batcher
	pubsub  pubsubKind           // Cluster: sharded pub/sub or not (cluster.go)
	cc      *redis.ClusterClient // rdb, when it is a Cluster client
	slots   slotReloader         // Cluster: reloads of the slot map after failures (failover.go)
}

var (
	_ driver.Driver  = (*Driver)(nil)
	_ driver.Sharded = (*Driver)(nil)
	_ driver.Scanner = (*Driver)(nil)
)

// New returns a Driver over rdb.
func New(rdb Client) *Driver {
	_, single := rdb.(*redis.Client)
	d := &Driver{rdb: rdb, io: clientTimeouts(rdb), routed: !single, workers: workers.New()}
	d.cc, _ = rdb.(*redis.ClusterClient)
	d.batch.run = d.runShared // a batch of one goes without a pipeline
	d.batch.workers = d.workers
	return d
}

// Close waits for commands that Run stopped waiting for at their deadline;
// afterwards such calls run in their caller. It does not close the go-redis
// client, which the caller owns.
func (d *Driver) Close() error {
	d.batch.close()   // no more batch helpers
	d.workers.Close() // waits for them and for abandoned commands
	return nil
}

// Sharded implements driver.Sharded: true for a Cluster client.
func (d *Driver) Sharded() bool { return d.cc != nil }

// PublishCommand implements driver.Driver: SPUBLISH on a Cluster whose
// servers have sharded pub/sub (Redis 7.0 and later), PUBLISH otherwise
// (see cluster.go).
func (d *Driver) PublishCommand() string { return d.publishCommand() }

// Run implements driver.Driver.
func (d *Driver) Run(ctx context.Context, calls ...*driver.Call) {
	d.runCalls(ctx, calls, d.mustLeaveEarly(ctx))
}

// RunToReply is Run for a caller that stops waiting by itself, such as a
// worker of a fan-out to several nodes that has a timer of its own: it
// waits for the replies in the caller even when ctx has a deadline that
// go-redis does not enforce, instead of handing the calls to a goroutine
// so as to return at the deadline (deadline.go). go-redis then ends such
// calls at its read timeout, or at once if ctx has ended before they got a
// connection; ctx bounds the whole call when the client enforces context
// deadlines.
func (d *Driver) RunToReply(ctx context.Context, calls ...*driver.Call) {
	d.runCalls(ctx, calls, false)
}

func (d *Driver) runCalls(ctx context.Context, calls []*driver.Call, leave bool) {
	if len(calls) == 0 {
		return
	}
	d.dispatch(ctx, calls, leave)
	if d.routed {
		d.retryTryAgain(ctx, calls, leave)
	}
}

// retryTryAgain sends again the calls a Cluster refused with TRYAGAIN. A
// node answers TRYAGAIN to a command with several keys in a slot being
// migrated when one of its keys is not on the node: the source when it has
// some of them (it redirects with ASK when it has none), and the target,
// after ASKING, unless it has them all. Missing keys count even when they exist
// nowhere, and dlock's scripts always name some (a Mutex's queue keys, a
// semaphore's limit): so a migration of a lock's slot refuses its scripts
// until it ends (SETSLOT NODE), however few keys it moves, not only while
// the keys are split for a moment. Redis refuses before it runs anything,
// so sending again is safe: the calls are sent again, after pauses growing
// from 5 ms to 200 ms (tryAgainPause), until the migration ends or ctx
// does (or tryAgainLimit passes, for a context that can never end). go-redis
// gives up after a few quick tries. Calls that still meet TRYAGAIN then keep
// the error (transient: the caller may try again).
func (d *Driver) retryTryAgain(ctx context.Context, calls []*driver.Call, leave bool) {
	var pacer tryAgainPacer
	for {
		var again []*driver.Call
		for _, c := range calls {
			// Calls with WAIT went through runOnMasters, which retries
			// TRYAGAIN itself.
			if c.Replicas <= 0 && refusedInMigration(c.Err) {
				again = append(again, c)
			}
		}
		if len(again) == 0 {
			return
		}
		if !pacer.pause(ctx) {
			return
		}
		// A sending refused with TRYAGAIN did not run, but go-redis may
		// have written it before (its own retries): keep what that says.
		resent := make([]bool, len(again))
		for i, c := range again {
			resent[i] = c.Resent
		}
		d.dispatch(ctx, again, leave)
		for i, c := range again {
			c.Resent = c.Resent || resent[i]
		}
	}
}

func isTryAgain(err error) bool {
	var rerr *driver.ReplyError
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Msg, "TRYAGAIN")
}

// refusedInMigration reports a refusal that ran nothing and that a slot
// migration explains: TRYAGAIN, or a redirection (MOVED, ASK) that go-redis
// left to the caller because the TRYAGAINs before it used up its budget of
// redirections per command (MaxRedirects counts both). A call refused with
// MOVED once the migration ended must go on to the slot's new master, not
// fail (TestClusterMigrationBlocksUntilItEnds met that once).
func refusedInMigration(err error) bool {
	if err == nil {
		return false // before rerr, which errors.As moves to the heap
	}
	var rerr *driver.ReplyError
	return errors.As(err, &rerr) && (strings.HasPrefix(rerr.Msg, "TRYAGAIN") ||
		strings.HasPrefix(rerr.Msg, "MOVED ") || strings.HasPrefix(rerr.Msg, "ASK "))
}

// dispatch sends calls directly, or in a shared pipeline when others are
// in flight. leave says the caller must be able to stop waiting before the
// round trip ends (mustLeaveEarly, deadline.go).
func (d *Driver) dispatch(ctx context.Context, calls []*driver.Call, leave bool) {
	active := d.active.Add(1)
	defer d.active.Add(-1)
	if active > 1 && !needsWait(calls) {
		// Others' commands are in flight: join the next pipeline (batch.go).
		// Calls with WAIT never do: WAIT must follow its own script.
		d.batch.submit(ctx, calls, leave)
		return
	}
	if leave && !d.enforcesDeadline(ctx) {
		d.runBounded(ctx, calls)
		return
	}
	d.run(ctx, calls)
}

func needsWait(calls []*driver.Call) bool {
	for _, c := range calls {
		if c.Replicas > 0 {
			return true
		}
	}
	return false
}

// run sends calls; on a Cluster, calls that a failover made fail get the
// slot map reloaded, and are sent again when they cannot have run
// (failover.go).
func (d *Driver) run(ctx context.Context, calls []*driver.Call) { d.send(ctx, calls, true) }

// runShared is run for a pipeline shared by several callers (batch.go),
// which runs on a context of its own: a failover's resend, which waits for
// a reload of the slot map, would outlast a caller whose context ended.
// The map is still reloaded, and each caller's own retry (a wait's, a
// renewal's) goes to the new master.
func (d *Driver) runShared(ctx context.Context, calls []*driver.Call) { d.send(ctx, calls, false) }

func (d *Driver) send(ctx context.Context, calls []*driver.Call, resend bool) {
	if len(calls) == 1 && calls[0].Replicas <= 0 {
		ran := d.runOne(ctx, calls[0])
		if d.cc != nil && failedOver(calls[0].Err) {
			d.recoverFailover(ctx, calls, []int32{ran}, resend)
		}
		return
	}
	var ran []int32
	if d.cc != nil {
		ran = make([]int32, len(calls))
	}
	d.runPipelined(ctx, calls, ran)
	if d.cc != nil {
		d.recoverFailover(ctx, calls, ran, resend)
	}
}

// resent reports, for a call whose script may have run ran times, whether
// it counts as sent twice: it may have run twice, or it may have run once
// before a refusal that retryTryAgain answers by sending it again (a reply
// lost, then TRYAGAIN on go-redis's resend), so that the next run is the
// second.
func resent(ran int32, err error) bool {
	return ran > 1 || ran > 0 && err != nil && refusedInMigration(err)
}

// runOne sends one call without a pipeline, the fast path for a lone lock
// operation: EVALSHA, and EVAL only when the server lost the script. It
// returns how many times the script may have run (mayHaveRun): go-redis
// writes it again after losing a reply, and a refused EVALSHA did not run.
func (d *Driver) runOne(ctx context.Context, c *driver.Call) (ran int32) {
	a := getArgv()
	res, err := d.rdb.Do(ctx, a.eval(c, false, d.routed)...).Result()
	ran = mayHaveRun(a.script.writes.Load(), err)
	if isNoScript(err) {
		res, err = d.rdb.Do(ctx, a.eval(c, true, d.routed)...).Result()
		ran += mayHaveRun(a.script.writes.Load(), err)
	}
	putArgv(a)
	c.Reply, c.Err = normalize(res, err)
	c.Resent = resent(ran, c.Err)
	return ran
}

// runPipelined sends all calls in one pipeline (go-redis splits it per node
// on Cluster), each followed by its WAIT when asked; calls that met NOSCRIPT
// are sent again with EVAL in a second pipeline. When ran is not nil,
// ran[i] is set to how many times calls[i]'s script may have run (as
// runOne returns it; 0 for calls with WAIT on a Cluster, which
// runOnMasters sends).
func (d *Driver) runPipelined(ctx context.Context, calls []*driver.Call, ran []int32) {
	for _, c := range calls {
		c.Resent = false
	}
	var small [16]int32 // the common batch: no allocation for the counts
	switch {
	case ran != nil:
		clear(ran)
	case len(calls) <= len(small):
		ran = small[:len(calls)]
	default:
		ran = make([]int32, len(calls))
	}
	pending := d.routeWaits(ctx, calls) // on Cluster, calls with WAIT go to their key's master (cluster.go)
	// at[i] is the index in calls of pending[i], which keep their order;
	// nil while pending is calls itself.
	var at []int
	if len(pending) != len(calls) {
		at = make([]int, 0, len(pending))
		for i, c := range calls {
			if len(at) < len(pending) && pending[len(at)] == c {
				at = append(at, i)
			}
		}
	}
	for attempt := 0; len(pending) > 0 && attempt < 2; attempt++ {
		pipe := d.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(pending))
		waits := make([]*redis.Cmd, len(pending))
		lines := make([]*argv, len(pending))
		for i, c := range pending {
			lines[i] = getArgv()
			cmds[i] = pipe.Do(ctx, lines[i].eval(c, attempt > 0, d.routed)...)
			if c.Replicas > 0 {
				waits[i] = pipe.Do(ctx, "wait", c.Replicas, c.ReplicaTimeout.Milliseconds())
			}
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		var (
			retry   []*driver.Call
			retryAt []int
		)
		for i, c := range pending {
			res, err := cmds[i].Result()
			k := i
			if at != nil {
				k = at[i]
			}
			ran[k] += mayHaveRun(lines[i].script.writes.Load(), err)
			putArgv(lines[i])
			if attempt == 0 && isNoScript(err) {
				retry, retryAt = append(retry, c), append(retryAt, k)
				continue
			}
			c.Reply, c.Err = normalize(res, err)
			c.Resent = resent(ran[k], c.Err)
			if waits[i] != nil && c.Err == nil {
				n, werr := waits[i].Int()
				c.Acked, c.Err = n, werr
			}
		}
		pending, at = retry, retryAt
	}
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
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
	var rerr redis.Error
	if errors.As(err, &rerr) && !isNetworkError(err) {
		return nil, &driver.ReplyError{Msg: err.Error(), Err: err}
	}
	return nil, err
}

// isNetworkError reports whether err comes from the connection rather than
// from the server: go-redis marks a few of its own errors with RedisError too.
func isNetworkError(err error) bool {
	var nerr interface{ Timeout() bool }
	return errors.As(err, &nerr)
}

// scanCount is SCAN's COUNT hint: how many keys each round trip examines.
// Larger means fewer round trips over a big keyspace, each blocking the
// server a little longer.
const scanCount = 1000

// keyScanner is the go-redis method Scan needs. Every go-redis client has
// it, but Client (what dlock.New accepts) does not require it, so a wrapper
// may lack it.
type keyScanner interface {
	Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd
}

// Scan implements driver.Scanner: one SCAN cursor loop on each master of a
// Cluster (concurrently, through ForEachMaster), or on the server itself.
// Its errors name SCAN, and on a Cluster the node.
func (d *Driver) Scan(ctx context.Context, match string, each func(key string) bool) error {
	var (
		mu      sync.Mutex
		stopped bool
	)
	// Masters are scanned concurrently; each must see one key at a time.
	visit := func(key string) bool {
		mu.Lock()
		defer mu.Unlock()
		if !stopped && !each(key) {
			stopped = true
		}
		return !stopped
	}
	if cc, ok := d.rdb.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return scanNode(ctx, node, node.Options().Addr, match, visit)
		})
		var serr *scanError
		if err != nil && !errors.As(err, &serr) {
			// ForEachMaster's own: finding the masters failed.
			err = fmt.Errorf("SCAN on the Cluster's masters: %w", err)
		}
		return err
	}
	s, ok := d.rdb.(keyScanner)
	if !ok {
		return fmt.Errorf("the Redis client %T has no Scan method, so its keys cannot be listed", d.rdb)
	}
	// No address: a Sentinel client's Options().Addr is a placeholder.
	return scanNode(ctx, s, "", match, visit)
}

// scanError is a failed SCAN round trip, on the Cluster node at addr, or
// on the server ("").
type scanError struct {
	addr string
	err  error
}

func (e *scanError) Error() string {
	if e.addr == "" {
		return "SCAN: " + e.err.Error()
	}
	return "SCAN on " + e.addr + ": " + e.err.Error()
}

func (e *scanError) Unwrap() error { return e.err }

// scanNode runs one SCAN cursor loop on the node at addr to its end, or
// until visit says stop.
func scanNode(ctx context.Context, s keyScanner, addr, match string, visit func(string) bool) error {
	var cursor uint64
	for {
		keys, next, err := s.Scan(ctx, cursor, match, scanCount).Result()
		if err != nil {
			return &scanError{addr: addr, err: err}
		}
		for _, k := range keys {
			if !visit(k) {
				return nil
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}
