package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/hold"
)

// Unlock releases the lock and ends the lease. It first stops renewal and
// waits for a renewal in flight, so no renewal can follow the release. It
// runs detached from ctx's cancellation, so a request whose context is
// already cancelled still releases its lock, and the wait and the release
// together are bounded by WithReleaseTimeout (an error matching
// context.DeadlineExceeded then). A release that fails ends the lease as lost
// (Done closes, Err matches ErrLockLost), since its request may still reach
// Redis and free the lock; so does one never sent because the renewal in
// flight did not return in time, and nothing renews the lock after either:
// it expires within its TTL. Unlock may then be called again to make sure
// the lock is released. A ctx that can never be cancelled (context.Background()) is
// used as it is, without a timer: the Redis client's own timeouts bound the
// release then, as they bound any command sent with such a context (go-redis:
// ReadTimeout, WriteTimeout and MaxRetries). It returns ErrNotHeld if the
// lock had expired or was taken over (another owner's key is never touched),
// or if the lease was already unlocked; a release that the Redis client sent
// twice after losing a reply, whose second sending found the lock gone, is a
// release, not ErrNotHeld, while the lease was valid when it went out. When
// waiters are queued the lock passes straight to the first of them; should
// that hand-off fail (a key beside the lock holds something dlock did not
// write: ErrKeyConflict; or Redis refused a command it runs, as an ACL
// changed under the holder does), the lock is released all the same, the
// lease ends (not lost), and Unlock returns the error, saying "the lock was
// released, but ...": the waiters take the free lock on their next poll.
// Under WithMinHold, an Unlock before the minimum hold is over leaves the
// key to expire at its end instead.
func (l *Lease) Unlock(ctx context.Context) error {
	return l.end(ctx, "Unlock", "it expired or was taken over before Unlock")
}

// end is Unlock, and Permits.Release: op names the call in errors, and lost
// says what ErrNotHeld means for this kind of lease.
func (l *Lease) end(ctx context.Context, op, lost string) error {
	rctx, cancel := detach(ctx, l.cfg.releaseTimeout)
	defer cancel()
	if err := l.beginEnd(ctx, rctx, op); err != nil {
		return err
	}
	sent := time.Now()
	var err error
	if rest := l.minHoldLeft(); rest > 0 {
		// WithMinHold: the key stays, unrenewed, until the hold's end;
		// nothing is released or handed over before it.
		err = l.h.Renew(rctx, l.s.Owner(), rest, true)
	} else if u, ok := l.h.(unlocker); ok {
		err = u.unlock(rctx, l.s.Owner())
	} else {
		err = l.h.release(rctx, l.s.Owner())
	}
	return l.finishEnd(ctx, op, lost, sent, err)
}

// beginEnd is end's first step: it stops the lease's renewal and waits,
// within rctx, for a renewal in flight (hold.Lease.BeginUnlock). A non-nil
// error is end's answer; the lease is then not to be released.
func (l *Lease) beginEnd(ctx, rctx context.Context, op string) error {
	err := l.s.BeginUnlock(rctx, false)
	if err == nil {
		return nil
	}
	err = errs.Errorf("dlock: %s %q: %w", op, l.Name(), err)
	if hold.IsRenewalPending(err) {
		l.observeRelease(ctx, err) // it ended the lease, as a failed release does
	}
	return err
}

// finishEnd is end's last step: it ends the lease by err, the answer of
// the release sent at sent, and returns the error end reports.
func (l *Lease) finishEnd(ctx context.Context, op, lost string, sent time.Time, err error) error {
	name := l.Name()
	// Read only on this rare path, after the release: renewals move a
	// validity deadline only later, and a lease past it is lost for good,
	// so they still tell whether the lease was valid when the release went
	// out (an Extend racing this Unlock is the caller's own race).
	if errors.Is(err, errResentRelease) && l.s.ValidAt(sent) {
		// The lock was ours when the release went out, so the likeliest
		// reason the second sending found it gone is the first sending:
		// the lock was held to the end either way (docs/design.md).
		err = nil
	}
	retried := l.s.EndUnlock(err)
	switch {
	case err == nil:
	case errors.Is(err, ErrNotHeld) && retried:
		// Likeliest, the failed release before this one landed.
		err = errs.Errorf("dlock: %s %q: %w: already released by the %s that failed before (its release landed after all), or %s",
			op, name, ErrNotHeld, op, lost)
	case errors.Is(err, ErrNotHeld):
		err = errs.Errorf("dlock: %s %q: %w: %s", op, name, ErrNotHeld, lost)
	default:
		err = errs.Redis(op, name, err)
	}
	l.observeRelease(ctx, err)
	return err
}

// minHoldLeft is how much of the lock's minimum hold (WithMinHold) is
// left, counted from when the grant's reply came back, which is after the
// grant: the key outlasts the grant by at least the minimum hold. Whole
// milliseconds, as the key's expiry takes them; 0 when none is left.
func (l *Lease) minHoldLeft() time.Duration {
	if l.cfg.minHold == 0 {
		return 0
	}
	rest := l.cfg.minHold - time.Since(l.grantedAt)
	return (rest + time.Millisecond - 1).Truncate(time.Millisecond)
}

// observeRelease tells the Observer, if any, how a release went.
func (l *Lease) observeRelease(ctx context.Context, err error) {
	if o := l.cfg.observer; o != nil {
		o.Released(ctx, l.info(), err)
	}
}
