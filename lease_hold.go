package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/hold"
)

// holder is the lock side of a lease: how to renew, release and read what
// the lease holds (renewal and remaining time as internal/hold calls them).
// Each primitive implements it once.
type holder interface {
	hold.Holder
	lockName() string
	// kind is the kind of lock held, for Observer events and Inspect.
	kind() Kind
	// release gives the hold up: nil when released, ErrNotHeld when it was
	// not owner's any more, or the failure.
	release(ctx context.Context, owner string) error
}

// unlocker is a holder whose Unlock differs from its release: a Mutex may
// hand the lock to a waiter of its own Client (mutex_wait.go).
type unlocker interface {
	unlock(ctx context.Context, owner string) error
}

// batchRenewer is a holder whose renewal is a set of script calls on the
// Client's driver, which the watchdog pipelines (hold.BatchRenewer).
type batchRenewer = hold.BatchRenewer

// recorder is a holder that records when its holds began, for Inspect's
// Holder.HeldFor (hold.Recorder).
type recorder = hold.Recorder

// drifter is a holder whose leases need another drift allowance than
// hold.Drift (hold.Drifter).
type drifter = hold.Drifter

// renewVia renews through RenewCalls on d: Holder.Renew for batchRenewers.
func renewVia(ctx context.Context, d driver.Driver, b batchRenewer, owner string, px time.Duration, shorten bool) error {
	calls := b.RenewCalls(owner, px, shorten)
	d.Run(ctx, calls...)
	return b.RenewResult(calls)
}

// errReleased is Err's answer after Unlock.
var errReleased = hold.ErrReleased

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

// newLease turns a grant into a Lease and hands it to the watchdog wd. from is
// a time no later than the grant (the start of the request that returned it,
// or of the last one that found it not granted yet), and px the key's
// remaining time as of then. A hand-off's short grant may first be claimed
// for the full TTL (hold.Lease.NeedsClaim).
func newLease(ctx context.Context, wd *hold.Watchdog, h holder, cfg *config, owner string, fence int64, from time.Time, px time.Duration) (*Lease, error) {
	l := new(Lease)
	if err := l.start(ctx, wd, h, cfg, owner, fence, from, px); err != nil {
		return nil, err
	}
	return l, nil
}

// start is newLease in l, which a caller may have allocated with what
// holds it (a reentrant owner's anchor).
func (l *Lease) start(ctx context.Context, wd *hold.Watchdog, h holder, cfg *config, owner string, fence int64, from time.Time, px time.Duration) error {
	return l.startNest(ctx, wd, h, cfg, owner, fence, from, px, nil)
}

// startNest is start for a parent lease (a reentrant owner's anchor):
// first, unless nil, adopts its first nested hold before the Watchdog
// shares it.
func (l *Lease) startNest(ctx context.Context, wd *hold.Watchdog, h holder, cfg *config, owner string, fence int64, from time.Time, px time.Duration, first func()) error {
	*l = Lease{h: h, cfg: cfg, token: fence, grantedAt: time.Now()}
	l.s.Start(wd, (*leaseHost)(l), owner, cfg.holdSettings(), from, px)
	var err error
	if l.s.NeedsClaim(from, px) {
		err = l.s.Claim(ctx)
		if errors.Is(err, ErrNotHeld) {
			return errGrantExpired
		}
	}
	if err == nil {
		if first != nil {
			first()
		}
		err = l.s.Track()
	}
	if err != nil {
		rctx, cancel := detach(ctx, cfg.releaseTimeout)
		defer cancel()
		_ = h.release(rctx, owner)
		switch {
		case errors.Is(err, ErrClosed):
			return err
		case errs.IsTransient(err) && ctx.Err() == nil:
			// Redis did not answer the claim: the grant is given back (or
			// expires), and a wait goes on, as it does through an outage.
			return errGrantExpired
		}
		return errs.Redis("claim", h.lockName(), err)
	}
	return nil
}

// errGrantExpired means a lock handed to this owner expired before it could
// be claimed, or the claim did not reach Redis; a waiting Lock goes back to
// waiting. It matches ErrNotObtained for a caller that does not wait.
var errGrantExpired = fmt.Errorf("%w: the lock was handed over, but expired (or Redis did not answer) before this process could claim it", ErrNotObtained)
