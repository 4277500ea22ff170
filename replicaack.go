package dlock

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/internal/hold"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/wait"
)

// Replica acknowledgement (WithReplicaAck): every call that can grant or
// re-arm a hold carries WAIT (driver.Call.Replicas), and a grant or renewal
// counts only once WAIT reports enough replicas. WAIT vouches only for this
// connection's writes, so a grant found in place (a hand-off) is claimed on a
// connection of ours before its lease is returned (hold.Lease.NeedsClaim); a call's own
// grant reports the full initial PX, a hand-off's claim window a shorter one
// (config.claimWindow). See docs/deployments.md, "Replica acknowledgement".

// tooFewAcked reports a write that acked replicas acknowledged as too
// few for cfg: nil when cfg asks for none or enough did.
func (c *config) tooFewAcked(acked int) error {
	if c.replicaAck <= 0 || acked >= c.replicaAck {
		return nil
	}
	return hold.TooFewAcks(acked, c.replicaAck, c.replicaAckTimeout)
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
