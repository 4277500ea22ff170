package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
)

// holder is the lock side of a lease: how to renew, release and read what
// the lease holds. Each primitive implements it once.
type holder interface {
	lockName() string
	// kind is the kind of lock held, for Observer events and Inspect.
	kind() Kind
	// renew re-arms the hold for px: nil when renewed, ErrNotHeld when the
	// hold is no longer owner's, or the failure. Unless shorten is set, it
	// never moves the hold's expiry on the server earlier (see
	// Lease.shortensLocked).
	Renew(ctx context.Context, owner string, px time.Duration, shorten bool) error
	// release gives the hold up: nil when released, ErrNotHeld when it was
	// not owner's any more, or the failure.
	release(ctx context.Context, owner string) error
	// remaining returns the hold's remaining time on the server, or
	// ErrNotHeld.
	Remaining(ctx context.Context, owner string) (time.Duration, error)
}

// unlocker is a holder whose Unlock differs from its release: a Mutex may
// hand the lock to a waiter of its own Client (mutex_wait.go).
type unlocker interface {
	unlock(ctx context.Context, owner string) error
}

// batchRenewer is a holder whose renewal is a set of script calls on the
// Client's driver, so the watchdog can pipeline many leases' renewals into
// one round trip. Holders that renew elsewhere (Redlock's nodes) only
// implement holder.Renew.
type batchRenewer interface {
	// RenewCalls returns the calls that re-arm the hold for px, as
	// holder.Renew: one for a lock on one slot, one per slot for a lock
	// spanning several.
	RenewCalls(owner string, px time.Duration, shorten bool) []*driver.Call
	// RenewResult interprets finished RenewCalls like holder.Renew.
	RenewResult(calls []*driver.Call) error
}

// renewVia renews through RenewCalls on d: holder.Renew for batchRenewers.
func renewVia(ctx context.Context, d driver.Driver, b batchRenewer, owner string, px time.Duration, shorten bool) error {
	calls := b.RenewCalls(owner, px, shorten)
	d.Run(ctx, calls...)
	return b.RenewResult(calls)
}

type leaseState uint8

const (
	leaseHeld leaseState = iota
	leaseUnlocking
	leaseReleased
)

var errReleased = fmt.Errorf("%w: released by Unlock", ErrNotHeld)

// errResentRelease is a release's "not held" answer where a command of the
// lease's own whose reply was lost may have released the lock itself: the
// same release, sent more than once by the Redis client
// (driver.Call.Resent), or a Redlock hand-off that did not answer.
var errResentRelease = fmt.Errorf("%w (a command of this lease whose reply was lost, such as an earlier sending of the release, may have released it)", ErrNotHeld)

// notHeld is a release script's "not held" answer to call.
func notHeld(call *driver.Call) error {
	if call.Resent {
		return errResentRelease
	}
	return ErrNotHeld
}

// claim re-arms a key that was handed over with a short claim window to the
// full TTL before the lease is returned, for leases the watchdog won't renew.
func (l *Lease) claim(ctx context.Context) error {
	start := time.Now()
	px := l.cappedLocked(l.ttl, start) // not shared yet: no lock needed
	if err := l.renewHold(ctx, px, l.shortensLocked(start, px)); err != nil {
		return err
	}
	l.applyValidityLocked(start, px)
	return nil
}

// newLease turns a grant into a Lease and hands it to the watchdog wd. from is
// a time no later than the grant (the start of the request that returned it,
// or of the last one that found it not granted yet), and px the key's
// remaining time as of then.
func newLease(ctx context.Context, wd *watchdog, h holder, cfg *config, owner string, fence int64, from time.Time, px time.Duration) (*Lease, error) {
	l := &Lease{
		wd:        wd,
		h:         h,
		cfg:       cfg,
		owner:     owner,
		token:     fence,
		kind:      h.kind(),
		grantedAt: time.Now(),
		ttl:       cfg.ttl,
		autoRenew: cfg.autoRenew,
		heapIndex: -1,
	}
	if cfg.maxHold > 0 {
		l.holdUntil = from.Add(cfg.maxHold)
	}
	l.applyValidityLocked(from, px)
	var err error
	// A grant shorter than the TTL is a hand-off's claim window. The
	// watchdog renews it soon, but a lease that won't be renewed, or whose
	// conservative validity is nearly spent (this process was slow to hear
	// of the grant), claims the full TTL before it is returned; so does one
	// that replicas must acknowledge, since the releaser's connection wrote
	// the grant and only a write of ours can be waited for (replicaack.go).
	if px < l.cappedLocked(l.ttl, from) && (!l.autoRenew || cfg.replicaAck > 0 || time.Until(l.validUntil) < px/4) {
		err = l.claim(ctx)
		if errors.Is(err, ErrNotHeld) {
			return nil, errGrantExpired
		}
	}
	if err == nil {
		err = wd.track(l)
	}
	if err != nil {
		rctx, cancel := detach(ctx, cfg.releaseTimeout)
		defer cancel()
		_ = h.release(rctx, owner)
		switch {
		case errors.Is(err, ErrClosed):
			return nil, err
		case errs.IsTransient(err) && ctx.Err() == nil:
			// Redis did not answer the claim: the grant is given back (or
			// expires), and a wait goes on, as it does through an outage.
			return nil, errGrantExpired
		}
		return nil, errs.Redis("claim", h.lockName(), err)
	}
	return l, nil
}

// errGrantExpired means a lock handed to this owner expired before it could
// be claimed, or the claim did not reach Redis; a waiting Lock goes back to
// waiting. It matches ErrNotObtained for a caller that does not wait.
var errGrantExpired = fmt.Errorf("%w: the lock was handed over, but expired (or Redis did not answer) before this process could claim it", ErrNotObtained)
