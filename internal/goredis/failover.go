package goredis

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/driverkit"
)

// Routing after a Cluster failover.
//
// A ClusterClient sends a slot's commands to the master its slot map
// names. go-redis reloads that map after MOVED or READONLY, and when a call
// finds it older than 10 s, but not after a network error: when a master
// dies and its replica is promoted, every command of its slots keeps going
// to the dead address (connection refused, after go-redis's own dial
// retries) for up to 10 s after the promotion, long enough for a lease to
// be declared lost while the new master holds its key.
//
// So the driver reloads the map itself when a call fails in a way a
// failover explains: a network error (refused, reset, EOF, timeout) or a
// refusal of the server (READONLY, CLUSTERDOWN, MASTERDOWN, LOADING).
// Reloads are spaced: at most one runs at a time, and each starts at least
// reloadEvery after the previous one, so a storm of failing calls costs the
// cluster a few CLUSTER SLOTS a second (go-redis's own lazy reload is
// similar: one at a time, then 200 ms before the next).
//
// A call is sent again once, after a reload that started after it failed,
// only when none of its sendings may have run: the script was never written
// (a dial refused or timed out), or the server refused it (READONLY,
// CLUSTERDOWN, ...) and it was written that one time. Such a resend cannot
// make a script run twice. A call that may have run (EOF, reset or timeout
// after its script was written; go-redis's own resends) keeps its error,
// and only triggers a reload for the calls that follow: sent again blindly,
// a release would find the lock gone and report it not held, a latch call
// would count twice. Its caller's own retries (a renewal's, Lock's poll)
// then go to the right master.

// reloadEvery is the least time between the starts of two reloads of the
// slot map by the driver; reloadTimeout bounds one. go-redis asks the nodes
// it knows in a random order, the dead one included, and a dead node costs
// its dial retries (about 2 s with go-redis's defaults, until its pool
// fails fast after PoolSize failed dials): the bound leaves time for the
// next node.
const (
	reloadEvery   = 100 * time.Millisecond
	reloadTimeout = 5 * time.Second
)

// slotReloader spaces the driver's reloads of a Cluster's slot map.
type slotReloader struct {
	mu      sync.Mutex
	started time.Time     // when the latest reload started
	running chan struct{} // closed when the running reload ends; nil when none runs
}

// load reloads cc's slot map now: ForEachMaster reloads it synchronously
// (ReloadState only schedules a reload, whose end nobody can wait for).
func load(ctx context.Context, cc *redis.ClusterClient) {
	ctx, cancel := context.WithTimeout(ctx, reloadTimeout)
	defer cancel()
	_ = cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil })
}

// beginLocked starts a reload when none runs and the last one started at least
// reloadEvery ago; it returns the channel to close when it ends, or nil.
func (r *slotReloader) beginLocked(now time.Time) chan struct{} {
	if r.running != nil || now.Sub(r.started) < reloadEvery {
		return nil
	}
	r.running, r.started = make(chan struct{}), now
	return r.running
}

func (r *slotReloader) end(done chan struct{}) {
	r.mu.Lock()
	r.running = nil
	r.mu.Unlock()
	close(done)
}

// soon reloads the slot map on a worker unless a reload runs or started
// less than reloadEvery ago: the calls that fail next ask again.
func (r *slotReloader) soon(cc *redis.ClusterClient, run func(func())) {
	r.mu.Lock()
	done := r.beginLocked(time.Now())
	r.mu.Unlock()
	if done == nil {
		return
	}
	run(func() {
		defer r.end(done)
		load(context.Background(), cc)
	})
}

// since returns once a reload of the slot map that started at or after t
// has ended, running one itself when none did (spaced as above); false
// when ctx ended first.
func (r *slotReloader) since(ctx context.Context, cc *redis.ClusterClient, t time.Time) bool {
	for {
		r.mu.Lock()
		if running := r.running; running != nil {
			from := r.started
			r.mu.Unlock()
			select {
			case <-running:
			case <-ctx.Done():
				return false
			}
			if !from.Before(t) {
				return true
			}
			continue
		}
		if !r.started.Before(t) {
			r.mu.Unlock() // one started since t, and has ended
			return true
		}
		now := time.Now()
		done := r.beginLocked(now)
		wait := reloadEvery - now.Sub(r.started)
		r.mu.Unlock()
		if done == nil {
			if !driverkit.Sleep(ctx, wait) {
				return false
			}
			continue
		}
		load(ctx, cc)
		r.end(done)
		return true
	}
}

// failedOver reports whether err is how a call fails when its slot's master
// has failed or is being replaced: a network error, or a refusal of a node
// that no longer (or not yet) serves the slot as a master. A context's end
// is not one.
func failedOver(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var inflight *driver.InFlightError
	if errors.As(err, &inflight) || errors.Is(err, driver.ErrClientClosed) {
		return false
	}
	if driverkit.RefusedBeforeRun(err) {
		return !isTryAgain(err) && !redis.HasErrorPrefix(err, "NOSCRIPT")
	}
	var nerr net.Error
	return errors.As(err, &nerr) || isNetworkError(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// recoverFailover handles, on a Cluster, the calls of one sending that a
// failover may explain (failedOver): it has the slot map reloaded, and
// sends again, once, those that cannot have run (ran[i] == 0) after a
// reload that started after they failed (see above). ran[i] is how often
// calls[i] may have run so far; calls with WAIT are left to runOnMasters,
// which reloads by itself.
//
// Without resend (a pipeline the batcher shares among callers, sent on a
// context of its own, where a resend that waits for a reload would outlast
// a caller whose context ended) it only has the map reloaded: each
// caller's own retry (a wait's, a renewal's) goes to the new master.
func (d *Driver) recoverFailover(ctx context.Context, calls []*driver.Call, ran []int32, resend bool) {
	failedAt := time.Now()
	var (
		again  []*driver.Call
		failed bool
	)
	for i, c := range calls {
		if c.Replicas > 0 || !failedOver(c.Err) {
			continue
		}
		failed = true
		if ran[i] == 0 {
			again = append(again, c)
		}
	}
	if !failed {
		return
	}
	if !resend || len(again) == 0 || ctx.Err() != nil || !d.slots.since(ctx, d.cc, failedAt) {
		d.slots.soon(d.cc, d.kit.Go)
		return
	}
	// Nothing of these calls ran: the resend's own count says it all.
	d.kit.SendAgain(ctx, again)
	twice := false
	for _, c := range again {
		twice = twice || failedOver(c.Err)
	}
	if twice {
		// The map reloaded still named a dead master (the failover is not
		// over, or the node asked had not heard of it yet): the calls that
		// follow will find a newer one.
		d.slots.soon(d.cc, d.kit.Go)
	}
}

// sent is the driverkit.Lib's Sent, after a sending in which some call
// failed. A call refused by a migrating slot after a sending that may have
// run (a reply lost, then TRYAGAIN on go-redis's resend) counts as sent
// twice: retryTryAgain sends it again, so that its next run is the second.
// On a Cluster, the calls a failover made fail get the slot map reloaded,
// and are sent again when they cannot have run (recoverFailover).
func (d *Driver) sent(ctx context.Context, calls []*driver.Call, ran []int32, shared bool) {
	for i, c := range calls {
		if ran[i] > 0 && refusedInMigration(c.Err) {
			c.Resent = true
		}
	}
	if d.cc != nil {
		d.recoverFailover(ctx, calls, ran, !shared)
	}
}
