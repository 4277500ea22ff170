package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/protocol"
)

// errDowngraded is the Err of a write lease that Downgrade ended.
var errDowngraded = fmt.Errorf("%w: downgraded to a read lease", ErrNotHeld)

// Downgrade turns write, a write lease of this lock, into a read lease in
// one atomic step: the lock never stands free in between, so no other
// writer can get in, and the readers queued at the head of the queue are
// granted at once (a writer queued ahead of them keeps waiting, now for the
// readers). The write lease ends: its Done closes and its Err matches
// ErrNotHeld; do not Unlock it. The returned read lease has a new fencing
// token, larger than the write lease's, so a resource that fences by token
// refuses writes still carrying the old one once it has seen the new one.
// It keeps the write lease's WithMaxHold deadline.
//
// Downgrade returns ErrInvalidArgument when write is not a write lease of
// this lock (same name, key prefix and Client), and an error matching
// ErrNotHeld when write no longer holds the lock (it expired, was lost,
// unlocked or downgraded already; it then ends). When Redis cannot be
// reached, write stays held and renewed; if the downgrade did reach Redis
// after all, write's next renewal reports it lost, and the read lease
// created is released in the background. With WithReplicaAck, a downgrade
// that too few replicas acknowledged ends write and releases the read lease
// again, returning an error matching ErrReplicaAck. Downgrade is safe for
// concurrent use; the caller must Unlock the returned Lease.
func (rw *RWMutex) Downgrade(ctx context.Context, write *Lease) (*Lease, error) {
	if err := rw.checkDowngrade(write); err != nil {
		return nil, err
	}
	owner, err := ownerid.New(rw.cfg.ownerInfo)
	if err != nil {
		return nil, err
	}
	wd := rw.c.wd
	holdUntil, validUntil, lost := write.s.Standing()
	switch {
	case lost == errDowngraded:
		return nil, errs.Errorf("dlock: Downgrade %q: %w already", rw.name, lost)
	case lost != nil:
		return nil, errs.Errorf("dlock: Downgrade %q: %w: the lease was lost: %v", rw.name, ErrNotHeld, lost)
	}
	// Stop renewing write and wait for a renewal in flight, as Unlock does:
	// no renewal of the writer may follow the downgrade.
	if err := write.s.BeginUnlock(ctx, true); err != nil {
		return nil, errs.Errorf("dlock: Downgrade %q: %w", rw.name, err)
	}
	start := time.Now()
	cfg, px := rw.readConfig(start, holdUntil)
	if px < MinTTL {
		write.s.Resume()
		return nil, errs.Errorf("dlock: Downgrade %q: %w: the maximum hold time (WithMaxHold) is reached", rw.name, ErrNotHeld)
	}
	// Past write's validity the answer no longer matters: write is lost then.
	dctx, cancel := context.WithDeadline(ctx, validUntil)
	fence, err := rw.downgrade(dctx, write.s.Owner(), owner, px)
	cancel()
	switch {
	case err == nil:
		write.s.EndAs(errDowngraded)
		return newLease(ctx, wd, &rw.reader, cfg, owner, fence, start, px)
	case errors.Is(err, ErrReplicaAck):
		// Downgraded, but too few replicas have the read lease: give it
		// back, as an acquire would.
		write.s.EndAs(errDowngraded)
		rctx, cancel := detach(ctx, cfg.releaseTimeout)
		defer cancel()
		if rerr := rw.reader.release(rctx, owner); rerr != nil && !errors.Is(rerr, ErrNotHeld) {
			cfg.logger.Warn("dlock: releasing a read lease that too few replicas acknowledged failed; it expires by its TTL",
				slog.String("lock", rw.name), slog.Any("error", rerr))
		}
		return nil, errs.Redis("Downgrade", rw.name, err)
	case errors.Is(err, ErrNotHeld):
		write.s.LoseEnding("Downgrade found the lock expired or held by others")
		return nil, errs.Errorf("dlock: Downgrade %q: %w: it expired or was taken over", rw.name, ErrNotHeld)
	}
	write.s.Resume()
	rw.c.abandon(ctx, &rw.reader, cfg, owner, err, nil)
	return nil, errs.Redis("Downgrade", rw.name, err)
}

// checkDowngrade rejects a lease that is not a write lease of rw.
func (rw *RWMutex) checkDowngrade(write *Lease) error {
	if rw.err != nil {
		return rw.err
	}
	var h *rwHalf
	if write != nil {
		h, _ = write.h.(*rwHalf)
	}
	if h == nil || h.mode != rwWrite || h.rw.c != rw.c || h.rw.keys.holders != rw.keys.holders {
		return errs.InvalidArgf("RWMutex(%q).Downgrade: not a write lease of this lock", rw.name)
	}
	return rw.c.checkOpen("Downgrade", rw.name)
}

// readConfig is the configuration and first expiry of the read lease a
// downgrade grants at start: it inherits the write lease's hold deadline.
func (rw *RWMutex) readConfig(start, holdUntil time.Time) (*config, time.Duration) {
	cfg := &rw.cfg
	px := cfg.initialPX()
	if !holdUntil.IsZero() {
		rest := holdUntil.Sub(start)
		if rest < px {
			px = rest
		}
		inherit := rw.cfg
		inherit.maxHold = rest
		cfg = &inherit
	}
	return cfg, px.Truncate(time.Millisecond)
}

// downgrade runs rw_downgrade.lua and translates its reply: the read
// lease's fencing token, or ErrNotHeld; with replica acknowledgement, an
// error matching ErrReplicaAck when the downgrade happened but too few
// replicas acknowledged it. Waiters of this Client that it granted are told
// directly.
func (rw *RWMutex) downgrade(ctx context.Context, writeOwner, readOwner string, px time.Duration) (int64, error) {
	fence, acked, err := protocol.RWDowngrade(ctx, rw.c.drv, rw.keys.all[:],
		string(rwWrite)+writeOwner, string(rwRead)+readOwner, px,
		&rw.ms, rw.keys.holders, rw.cfg.ack(), rw.deliver)
	if err != nil {
		return 0, err
	}
	return fence, rw.cfg.tooFewAcked(acked)
}
