package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/wait"
)

// Replica acknowledgement (WithReplicaAck): every call that can grant or
// re-arm a hold carries WAIT (driver.Call.Replicas), and a grant or renewal
// counts only once WAIT reports enough replicas. WAIT vouches only for this
// connection's writes, so a grant found in place (a hand-off) is claimed on a
// connection of ours before its lease is returned (newLease); a call's own
// grant reports the full initial PX, a hand-off's claim window a shorter one
// (config.claimWindow). See docs/deployments.md, "Replica acknowledgement".

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
			return tooFewAcks(call.Acked, call.Replicas, call.ReplicaTimeout)
		}
	}
	return nil
}

// tooFewAcks is the error of a write that acked of replicas acknowledged
// within timeout.
func tooFewAcks(acked, replicas int, timeout time.Duration) error {
	return fmt.Errorf("%w: %d of %d replicas acknowledged it within %v",
		ErrReplicaAck, acked, replicas, timeout)
}

// tooFewAcked reports a write that acked replicas acknowledged as too
// few for cfg: nil when cfg asks for none or enough did.
func (c *config) tooFewAcked(acked int) error {
	if c.replicaAck <= 0 || acked >= c.replicaAck {
		return nil
	}
	return tooFewAcks(acked, c.replicaAck, c.replicaAckTimeout)
}

// ack is the replica acknowledgement cfg asks of calls that grant.
func (c *config) ack() protocol.Ack {
	if c.replicaAck <= 0 {
		return protocol.Ack{}
	}
	return protocol.Ack{Replicas: c.replicaAck, Timeout: c.replicaAckTimeout}
}

// grantAcked turns an acquire attempt into the wait engine's result,
// checking its replica acknowledgement. A grant that the attempt wrote
// itself (full initial PX) must have been acknowledged: if it was not, the
// lock is released again (handed to the next waiter) before grantAcked
// returns the error. Other outcomes pass unchanged: not granted, or a
// grant found in place, which newLease claims with WAIT.
func grantAcked(ctx context.Context, q queuedLock, cfg *config, owner string, a protocol.Attempt) (wait.Result, error) {
	r := wait.Result{Granted: a.Granted, Fence: a.Fence, PTTL: a.PTTL, LastFence: a.LastFence}
	if !r.Granted || cfg.replicaAck <= 0 || r.PTTL < cfg.initialPX().Truncate(time.Millisecond) {
		return r, nil
	}
	err := cfg.tooFewAcked(a.Acked)
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
		return l.h.Renew(ctx, l.owner, px, shorten)
	}
	calls := b.RenewCalls(l.owner, px, shorten)
	l.cfg.askAck(calls...)
	l.wd.drv.Run(ctx, calls...)
	if err := b.RenewResult(calls); err != nil {
		return err
	}
	return ackErr(calls...)
}
