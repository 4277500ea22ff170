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
	"github.com/dlock-go/dlock/internal/driverkit"
)

// WAIT on a Redis Cluster.
//
// WAIT must run on the connection that wrote, right after the script. A
// ClusterClient's pipeline routes a keyless WAIT to the node of the
// pipeline's first command (or a random one), and when a script is
// redirected (MOVED, ASK) go-redis re-sends the script alone, elsewhere:
// the WAIT would then count replicas of the wrong write. So calls that ask
// for WAIT go to the master of their first key through that node's own
// client, script and WAIT in one pipeline (driverkit.Driver.Pipeline), and
// this file follows MOVED and ASK itself, so that a redirection during
// resharding never reaches the caller. Those pipelines bypass hooks added
// to the ClusterClient itself (the node clients' hooks still run).

// maxRedirects bounds how often one call with WAIT is redirected (MOVED,
// ASK) before its last error is returned. TRYAGAIN is retried until the
// call's context ends (tryAgainPacer).
const maxRedirects = 16

// routed is a call with WAIT on its way to a master.
type routed struct {
	c         *driver.Call
	node      *redis.Client
	asking    bool  // the node is importing the slot: ASKING first
	redirects int   // MOVED and ASK so far
	ran       int32 // how often the script may have run, over all sendings
}

// runOnMasters is the driverkit.Lib's Replicated: it runs each call,
// followed by its WAIT, on the master that serves its first key, one
// pipeline per master, following redirections and retrying TRYAGAIN.
func (d *Driver) runOnMasters(ctx context.Context, calls []*driver.Call) {
	var pending []*routed
	for _, c := range calls {
		if len(c.Keys) == 0 {
			c.Reply, c.Acked, c.Err = nil, 0, errors.New("dlock: a call with WAIT has no key to route it by on Cluster")
			continue
		}
		node, err := d.cc.MasterForKey(ctx, c.Keys[0])
		if err != nil {
			c.Reply, c.Acked, c.Err = nil, 0, err
			continue
		}
		pending = append(pending, &routed{c: c, node: node})
	}
	var pacer tryAgainPacer // redirections need no pause
	for len(pending) > 0 {
		type dest struct {
			node   *redis.Client
			asking bool
		}
		byDest := make(map[dest][]*routed)
		var order []dest
		for _, r := range pending {
			k := dest{r.node, r.asking}
			if byDest[k] == nil {
				order = append(order, k)
			}
			byDest[k] = append(byDest[k], r)
		}
		var (
			mu       sync.Mutex
			next     []*routed
			tryAgain atomic.Bool
			wg       sync.WaitGroup
		)
		for _, k := range order {
			wg.Add(1)
			go func(k dest, rs []*routed) {
				defer wg.Done()
				retry, again := d.runOnNode(ctx, k.node, k.asking, rs)
				if again {
					tryAgain.Store(true)
				}
				mu.Lock()
				next = append(next, retry...)
				mu.Unlock()
			}(k, byDest[k])
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
// (redirected, TRYAGAIN), with their node and flags updated and their last
// error recorded, and whether any met TRYAGAIN.
func (d *Driver) runOnNode(ctx context.Context, node *redis.Client, asking bool, rs []*routed) (retry []*routed, tryAgain bool) {
	calls := make([]*driver.Call, len(rs))
	ran := make([]int32, len(rs))
	for i, r := range rs {
		calls[i], ran[i] = r.c, r.ran
	}
	d.kit.Pipeline(ctx, func(ctx context.Context, cmds []*argv, out []driverkit.Result) {
		doMulti(ctx, node.Pipeline(), asking, cmds, out)
	}, calls, ran)
	for i, r := range rs {
		r.ran = ran[i]
		err := r.c.Err
		if err == nil {
			continue
		}
		kind, addr := redirection(err)
		switch {
		case (kind == "MOVED" || kind == "ASK") && r.redirects >= maxRedirects:
			continue // keeps its error
		case kind == "MOVED" || kind == "ASK":
			r.redirects++
			target, lerr := masterAt(ctx, d.cc, addr)
			if lerr != nil {
				r.c.Err = fmt.Errorf("%w (following %v)", lerr, err)
				continue
			}
			r.node, r.asking = target, kind == "ASK"
		case kind == "TRYAGAIN":
			tryAgain = true
		default:
			if failedOver(err) {
				d.slots.soon(d.cc, d.kit.Go) // a failover may have moved the slot: route afresh next time
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
	var rerr *driver.ReplyError
	if !errors.As(err, &rerr) {
		return "", ""
	}
	f := strings.Fields(rerr.Msg)
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
		case try == 3 || !driverkit.Sleep(ctx, time.Duration(try+1)*20*time.Millisecond):
			return nil, fmt.Errorf("dlock: redirected to %s, which the cluster does not list as a master", addr)
		}
	}
}
