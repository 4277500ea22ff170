package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/wait"
)

// Replica acknowledgement (WithReplicaAck).
//
// Redis replicates asynchronously: a master can reply to a grant and die
// before the grant reaches the replica that takes over. With replica
// acknowledgement on, every call that can grant or re-arm a hold carries
// WAIT (driver.Call.Replicas), which the driver sends on the script's own
// connection right after it, and a grant or renewal counts only once WAIT
// reports enough replicas.
//
// WAIT counts the replicas that have the connection's last write, so it
// vouches only for a grant that the call itself wrote. A grant this owner
// finds in place was written by the releaser's connection (a hand-off,
// heard by message or found by a later attempt); such a lease is claimed
// before it is returned (newLease): the claim re-arms the key, with WAIT, on
// a connection of ours, and since a master replicates its writes in order,
// replicas that acknowledged the claim hold the grant too. The two cases
// are told apart by the grant's PX: a call's own grant reports the full
// initial PX, while a hand-off's claim window is kept at least a millisecond
// shorter whenever replica acknowledgement is on (config.claimWindow).

// askAck asks for WAIT after each of calls when cfg requires replica
// acknowledgement.
func (c *config) askAck(calls ...*driver.Call) {
	if c.replicaAck <= 0 {
		return
	}
	for _, call := range calls {
		call.Replicas, call.ReplicaTimeout = c.replicaAck, c.replicaAckTimeout
	}
}

// ackErr reports the first of calls whose writes reached fewer replicas
// than it asked WAIT for. Calls that failed, or asked for no WAIT, pass.
func ackErr(calls ...*driver.Call) error {
	for _, call := range calls {
		if call.Replicas > 0 && call.Err == nil && call.Acked < call.Replicas {
			return fmt.Errorf("%w: %d of %d replicas acknowledged it within %v",
				ErrReplicaAck, call.Acked, call.Replicas, call.ReplicaTimeout)
		}
	}
	return nil
}

// grantAcked checks an acquire attempt's replica acknowledgement. A grant
// that call wrote itself (full initial PX) must have been acknowledged: if
// it was not, the lock is released again (handed to the next waiter)
// before grantAcked returns the error. Other outcomes pass unchanged: not
// granted, or a grant found in place, which newLease claims with WAIT.
func grantAcked(ctx context.Context, q queuedLock, cfg *config, owner string, call *driver.Call, r wait.Result) (wait.Result, error) {
	if !r.Granted || call.Replicas <= 0 || r.PTTL < cfg.initialPX().Truncate(time.Millisecond) {
		return r, nil
	}
	err := ackErr(call)
	if err == nil {
		return r, nil
	}
	rctx, cancel := detach(ctx, cfg.releaseTimeout)
	defer cancel()
	if rerr := q.release(rctx, owner); rerr != nil && !errors.Is(rerr, ErrNotHeld) {
		cfg.logger.Warn("dlock: releasing a grant that too few replicas acknowledged failed; the lock expires by its TTL",
			slog.String("lock", q.lockName()), slog.Any("error", rerr))
	}
	return wait.Result{}, err
}

// renewHold re-arms the lease's hold for px (shortening it only when
// shorten is set): its holder's renewal, followed
// by WAIT when the lease's options ask for replica acknowledgement, in
// which case a renewal that too few replicas acknowledged is an error
// matching ErrReplicaAck (the key was re-armed on the master, but the lease
// must not count on it). The watchdog's batches do the same (watchdog.go).
func (l *Lease) renewHold(ctx context.Context, px time.Duration, shorten bool) error {
	b, ok := l.h.(batchRenewer)
	if !ok || l.cfg.replicaAck <= 0 {
		return l.h.renew(ctx, l.owner, px, shorten)
	}
	calls := b.renewCalls(l.owner, px, shorten)
	l.cfg.askAck(calls...)
	l.wd.drv.Run(ctx, calls...)
	if err := b.renewResult(calls); err != nil {
		return err
	}
	return ackErr(calls...)
}
