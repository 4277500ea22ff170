package goredis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
)

// Redis Cluster specifics: WAIT on the right node, and sharded pub/sub.
//
// WAIT must run on the connection that wrote, right after the script. A
// ClusterClient's pipeline routes a keyless WAIT to the node of the
// pipeline's first command (or a random one), and when a script is
// redirected (MOVED, ASK) go-redis re-sends the script alone, elsewhere:
// the WAIT would then count replicas of the wrong write. So calls that ask
// for WAIT go to the master of their first key through that node's own
// client, script and WAIT in one pipeline, and this file follows MOVED and
// ASK itself, so that a redirection during resharding never reaches the
// caller. Those pipelines bypass hooks added to the ClusterClient itself
// (the node clients' hooks still run).

// maxRedirects bounds how often one call with WAIT is redirected (MOVED,
// ASK) or sent again with EVAL (NOSCRIPT) before its last error is
// returned. TRYAGAIN is retried until the call's context ends
// (tryAgainPacer).
const maxRedirects = 16

// routeWaits sends the calls that ask for WAIT to their key's master when
// the client is a ClusterClient, and returns the calls left for the
// caller's own pipeline: all of them for other clients.
func (d *Driver) routeWaits(ctx context.Context, calls []*driver.Call) []*driver.Call {
	cc, ok := d.rdb.(*redis.ClusterClient)
	if !ok || !needsWait(calls) {
		return calls
	}
	var rest, waits []*driver.Call
	for _, c := range calls {
		if c.Replicas > 0 {
			waits = append(waits, c)
		} else {
			rest = append(rest, c)
		}
	}
	runOnMasters(ctx, cc, waits, func() { d.slots.soon(cc, d.workers.Go) })
	return rest
}

// routed is a call with WAIT on its way to a master.
type routed struct {
	c         *driver.Call
	node      *redis.Client
	asking    bool // the node is importing the slot: ASKING first
	eval      bool // the node lacks the script: EVAL
	redirects int  // MOVED, ASK and NOSCRIPT so far
}

// runOnMasters runs each call, followed by its WAIT, on the master that
// serves its first key, one pipeline per master, following redirections
// and retrying TRYAGAIN. reload asks for the slot map to be reloaded, after
// an error that a failover explains.
func runOnMasters(ctx context.Context, cc *redis.ClusterClient, calls []*driver.Call, reload func()) {
	var pending []*routed
	for _, c := range calls {
		if len(c.Keys) == 0 {
			c.Reply, c.Acked, c.Err = nil, 0, errors.New("dlock: a call with WAIT has no key to route it by on Cluster")
			continue
		}
		node, err := cc.MasterForKey(ctx, c.Keys[0])
		if err != nil {
			c.Reply, c.Acked, c.Err = nil, 0, err
			continue
		}
		pending = append(pending, &routed{c: c, node: node})
	}
	var pacer tryAgainPacer // redirections need no pause
	for len(pending) > 0 {
		byNode := make(map[*redis.Client][]*routed)
		var order []*redis.Client
		for _, r := range pending {
			if byNode[r.node] == nil {
				order = append(order, r.node)
			}
			byNode[r.node] = append(byNode[r.node], r)
		}
		var (
			mu       sync.Mutex
			next     []*routed
			tryAgain atomic.Bool
			wg       sync.WaitGroup
		)
		for _, node := range order {
			wg.Add(1)
			go func(node *redis.Client, rs []*routed) {
				defer wg.Done()
				retry, again := runOnNode(ctx, cc, node, rs, reload)
				if again {
					tryAgain.Store(true)
				}
				mu.Lock()
				next = append(next, retry...)
				mu.Unlock()
			}(node, byNode[node])
		}
		wg.Wait()
		pending = next
		if len(pending) > 0 && tryAgain.Load() {
			// A slot in the middle of a migration, which refuses the
			// script until it ends (see retryTryAgain).
			if !pacer.pause(ctx) {
				return // the calls keep their last error
			}
		}
	}
}

// runOnNode sends rs to node in one pipeline, each script followed by its
// WAIT, and records the outcomes. It returns the calls to send again
// (redirected, NOSCRIPT, TRYAGAIN), with their node and flags updated and
// their last error recorded, and whether any met TRYAGAIN.
func runOnNode(ctx context.Context, cc *redis.ClusterClient, node *redis.Client, rs []*routed, reload func()) (retry []*routed, tryAgain bool) {
	pipe := node.Pipeline()
	cmds := make([]*redis.Cmd, len(rs))
	waits := make([]*redis.Cmd, len(rs))
	lines := make([]*argv, len(rs))
	for i, r := range rs {
		if r.asking {
			pipe.Do(ctx, "asking")
		}
		lines[i] = getArgv()
		cmds[i] = pipe.Do(ctx, lines[i].eval(r.c, r.eval, false)...)
		waits[i] = pipe.Do(ctx, "wait", r.c.Replicas, r.c.ReplicaTimeout.Milliseconds())
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for i, a := range lines {
		rs[i].c.Resent = rs[i].c.Resent || a.script.resent()
		putArgv(a)
	}
	for i, r := range rs {
		res, err := cmds[i].Result()
		r.c.Reply, r.c.Err = normalize(res, err)
		r.c.Acked = 0
		if r.c.Err == nil { // a nil reply is no error
			n, werr := waits[i].Int()
			r.c.Acked, r.c.Err = n, werr
			continue
		}
		kind, addr := redirection(err)
		redirect := kind == "MOVED" || kind == "ASK" || isNoScript(err) && !r.eval
		switch {
		case redirect && r.redirects >= maxRedirects:
			continue // keeps its error
		case isNoScript(err) && !r.eval:
			r.eval = true
			r.redirects++
		case kind == "MOVED" || kind == "ASK":
			r.redirects++
			target, lerr := masterAt(ctx, cc, addr)
			if lerr != nil {
				r.c.Err = fmt.Errorf("%w (following %v)", lerr, err)
				continue
			}
			r.node, r.asking = target, kind == "ASK"
		case kind == "TRYAGAIN":
			tryAgain = true
		default:
			if failedOver(err) {
				reload() // a failover may have moved the slot: route afresh next time
			}
			continue
		}
		retry = append(retry, r)
	}
	return retry, tryAgain
}

// redirection classifies a Cluster redirection or refusal: "MOVED" or
// "ASK" with the address to go to, "TRYAGAIN", or "".
func redirection(err error) (kind, addr string) {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return "", ""
	}
	f := strings.Fields(rerr.Error())
	switch {
	case len(f) == 3 && (f[0] == "MOVED" || f[0] == "ASK"):
		return f[0], f[2]
	case len(f) > 0 && f[0] == "TRYAGAIN":
		return "TRYAGAIN", ""
	}
	return "", ""
}

// masterAt returns the node client of the master at addr, reloading the
// Cluster's state (ForEachMaster reloads it before it iterates) so that a
// master promoted or added since the last reload is found. It retries a
// few times: the node asked for the state may not know the change yet.
func masterAt(ctx context.Context, cc *redis.ClusterClient, addr string) (*redis.Client, error) {
	for try := 0; ; try++ {
		var (
			mu    sync.Mutex
			found *redis.Client
		)
		err := cc.ForEachMaster(ctx, func(_ context.Context, node *redis.Client) error {
			if node.Options().Addr == addr {
				mu.Lock()
				found = node
				mu.Unlock()
			}
			return nil
		})
		switch {
		case found != nil:
			return found, nil
		case err != nil:
			return nil, err
		case try == 3 || !sleepCtx(ctx, time.Duration(try+1)*20*time.Millisecond):
			return nil, fmt.Errorf("dlock: redirected to %s, which the cluster does not list as a master", addr)
		}
	}
}

// tryAgainLimit bounds the retries of TRYAGAIN for a context that can
// never end (context.Background()): nothing else would end them while a
// migration stalls.
const tryAgainLimit = 10 * time.Second

// tryAgainPacer paces the rounds of sending again calls refused with
// TRYAGAIN (retryTryAgain, runOnMasters).
type tryAgainPacer struct {
	rounds   int       // pauses so far
	deadline time.Time // set at the first pause: tryAgainLimit on for a context that can never end, else zero (none)
}

// pause waits before the next round (tryAgainPause); false, at once, when
// ctx has ended or the pause would end past the deadline: the calls keep
// their error.
func (p *tryAgainPacer) pause(ctx context.Context) bool {
	if p.rounds == 0 && ctx.Done() == nil {
		p.deadline = time.Now().Add(tryAgainLimit)
	}
	pause := tryAgainPause(p.rounds)
	p.rounds++
	if ctx.Err() != nil || !p.deadline.IsZero() && time.Now().Add(pause).After(p.deadline) {
		return false
	}
	return sleepCtx(ctx, pause)
}

// tryAgainPause is how long to wait before sending again, in round (from
// 0), calls a migrating slot refused with TRYAGAIN: 5 ms, doubling to at
// most 200 ms.
func tryAgainPause(round int) time.Duration {
	const first, most = 5 * time.Millisecond, 200 * time.Millisecond
	if round >= 6 { // 5 ms << 6 is past most
		return most
	}
	return first << round
}

// sleepCtx sleeps for d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// pubsubKind caches which pub/sub a Cluster's servers offer: unknown until
// probed, then plain (PUBLISH, broadcast to every node) or sharded
// (SPUBLISH, delivered by the slot's own nodes; Redis 7.0 and later).
type pubsubKind struct {
	mu      sync.Mutex
	kind    atomic.Int32
	retryAt time.Time // after a failed probe, when to probe again
}

const (
	pubsubUnknown int32 = iota
	pubsubPlain
	pubsubSharded
)

// probeTimeout bounds the probe, and probeRetry spaces probes after one
// failed (the cluster was unreachable): meanwhile PUBLISH is used.
const (
	probeTimeout = 2 * time.Second
	probeRetry   = time.Second
)

// publishCommand is PublishCommand: SPUBLISH on a Cluster whose servers have
// it, so that a release notifies only the nodes of the lock's slot (plain
// PUBLISH is broadcast over the cluster bus to every node), else PUBLISH.
func (d *Driver) publishCommand() string {
	if sharded, _ := d.shardedPubSub(context.Background()); sharded {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

// shardedPubSub reports whether this driver uses sharded pub/sub: only on
// a Cluster whose servers know SPUBLISH (COMMAND INFO, asked once). The
// answer is kept for the driver's life, so its publishes and its
// subscription always agree. Mixed servers (during an upgrade to 7.0) are
// not supported: the answer is the first node's.
func (d *Driver) shardedPubSub(ctx context.Context) (bool, error) {
	cc, ok := d.rdb.(*redis.ClusterClient)
	if !ok {
		return false, nil
	}
	if k := d.pubsub.kind.Load(); k != pubsubUnknown {
		return k == pubsubSharded, nil
	}
	d.pubsub.mu.Lock()
	defer d.pubsub.mu.Unlock()
	if k := d.pubsub.kind.Load(); k != pubsubUnknown {
		return k == pubsubSharded, nil
	}
	if time.Now().Before(d.pubsub.retryAt) {
		return false, errors.New("dlock: the Cluster could not be asked whether it has sharded pub/sub")
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	info, err := cc.Do(pctx, "command", "info", "spublish").Slice()
	switch {
	case err == nil:
		if len(info) == 1 && info[0] != nil {
			d.pubsub.kind.Store(pubsubSharded)
			return true, nil
		}
		d.pubsub.kind.Store(pubsubPlain)
	case isServerError(err):
		d.pubsub.kind.Store(pubsubPlain) // COMMAND refused (renamed, ACL): stay with what always works
	default:
		d.pubsub.retryAt = time.Now().Add(probeRetry)
		return false, fmt.Errorf("dlock: asking the Cluster whether it has sharded pub/sub: %w", err)
	}
	return false, nil
}

// isServerError reports whether err is an error reply of the server.
func isServerError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && !isNetworkError(err)
}
