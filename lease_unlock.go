package dlock

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
)

// beginUnlock stops watching a lease and waits for its renewal in flight, so
// that the release that follows is the last command for this lease. When
// ctx ends first (the release timeout of an Unlock), the error matches
// ctx's: the renewal was sent to a server that has not answered since, and
// the release would fare no better. With keep (a Downgrade, a reentrant
// owner's renewal) the lease then goes back to the watchdog, unchanged;
// without it (an Unlock) it ends lost, unrenewed, so that the lock expires
// within its TTL unless Unlock is called again (renewed on, it stayed held
// for as long as the process lived when the holder did not retry).
func (w *watchdog) beginUnlock(ctx context.Context, l *Lease, keep bool) error {
	w.mu.Lock()
	switch l.state {
	case leaseUnlocking:
		w.mu.Unlock()
		return fmt.Errorf("%w: Unlock is already in progress", ErrNotHeld)
	case leaseReleased:
		err := l.err
		w.mu.Unlock()
		if err == errDowngraded {
			return err
		}
		return fmt.Errorf("%w: the lease has already ended (unlocked or released)", ErrNotHeld)
	}
	l.state = leaseUnlocking
	if l.heapIndex >= 0 {
		heap.Remove(&w.leases, l.heapIndex)
	}
	renewing := l.renewing
	w.mu.Unlock()
	if renewing != nil {
		select {
		case <-renewing:
		case <-ctx.Done():
			err := &renewalPendingError{err: ctx.Err()}
			if keep {
				w.resume(l)
			} else {
				w.endUnlock(l, err)
			}
			return err
		}
	}
	return nil
}

// renewalPendingError is a release not sent because a renewal sent before
// it had not returned within the release timeout.
type renewalPendingError struct{ err error }

func (e *renewalPendingError) Error() string {
	return "a renewal sent earlier has not returned within the release timeout, so the release was not sent: " +
		"Redis is not answering; the lock expires within its TTL, or call Unlock again: " + e.err.Error()
}

func (e *renewalPendingError) Unwrap() error { return e.err }

// isRenewalPending reports whether err is, or wraps, a renewalPendingError.
// (A pointer declared for errors.As escapes to the heap wherever it is
// declared: in a function of its own, only a failed call pays for it.)
func isRenewalPending(err error) bool {
	var pending *renewalPendingError
	return errors.As(err, &pending)
}

// resume hands a lease that beginUnlock took from the watchdog back to it,
// unchanged, when the release or Downgrade it was paused for did not
// happen.
func (w *watchdog) resume(l *Lease) {
	w.mu.Lock()
	l.state = leaseHeld
	funcs := w.watchAgainLocked(l)
	w.mu.Unlock()
	runLossFuncs(funcs, l)
	w.poke()
}

// watchAgainLocked puts a held lease that Unlock or Downgrade took from the
// watchdog back under its watch; after close, which declared every lease it
// watched lost, it declares this one lost too, since nothing will renew it
// or close its Done at its deadline. It returns the loss callbacks to run
// after w.mu is released. Nested holds of a reentrant lock are never
// watched: their parent is.
func (w *watchdog) watchAgainLocked(l *Lease) []func(error) {
	switch {
	case l.err != nil || l.parent != nil || l.heapIndex >= 0:
		return nil
	case w.closed:
		return w.loseLocked(l, "the client was closed, so nothing renews it")
	}
	l.eventAt = l.nextEventLocked()
	heap.Push(&w.leases, l)
	return nil
}

// endUnlock records the outcome of the release. A failed release ends the
// lease as lost: its request may still reach Redis (a reply lost or late, a
// Redlock node that did not answer in time) and free the lock at any moment,
// so the lease can no longer say that the lock is its own. Unlock can still
// be called again, to make sure the lock is released.
func (w *watchdog) endUnlock(l *Lease, err error) {
	var funcs []func(error)
	w.mu.Lock()
	switch {
	case err == nil, errs.ReleasedDespiteConflict(err):
		// A release that freed the lock ends the lease, even when it
		// reports a foreign key beside it (Unlock returns that error).
		l.state = leaseReleased
		l.closeDoneLocked()
	case errors.Is(err, ErrNotHeld):
		funcs = w.loseLocked(l, "it expired or was taken over before Unlock")
		l.state = leaseReleased
	default:
		// The release may still land, so the lease cannot go back to
		// being held until its deadline: another owner could then take
		// the lock under a lease that says it is held.
		l.state = leaseHeld // for the Unlock called again
		l.lostInEnd = l.lostInEnd || l.err == nil
		reason := fmt.Sprintf("releasing it failed (%v), and the release may still reach Redis", err)
		var pending *renewalPendingError
		if errors.As(err, &pending) {
			reason = fmt.Sprintf("Unlock gave up (%v): nothing renews the lock any more, and it expires within its TTL unless Unlock is called again", pending.err)
		}
		funcs = w.loseLocked(l, reason)
	}
	w.mu.Unlock()
	runLossFuncs(funcs, l)
}

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
// waiters are queued the lock passes straight to the first of them.
func (l *Lease) Unlock(ctx context.Context) error {
	return l.end(ctx, "Unlock", "it expired or was taken over before Unlock")
}

// end is Unlock, and Permits.Release: op names the call in errors, and lost
// says what ErrNotHeld means for this kind of lease.
func (l *Lease) end(ctx context.Context, op, lost string) error {
	name := l.Name()
	rctx, cancel := detach(ctx, l.cfg.releaseTimeout)
	defer cancel()
	if err := l.wd.beginUnlock(rctx, l, false); err != nil {
		err = errs.Errorf("dlock: %s %q: %w", op, name, err)
		if isRenewalPending(err) {
			l.observeRelease(ctx, err) // it ended the lease, as a failed release does
		}
		return err
	}
	sent := time.Now()
	var err error
	if u, ok := l.h.(unlocker); ok {
		err = u.unlock(rctx, l.owner)
	} else {
		err = l.h.release(rctx, l.owner)
	}
	// Read only on this rare path, after the release: renewals move a
	// validity deadline only later, and a lease past it is lost for good,
	// so they still tell whether the lease was valid when the release went
	// out (an Extend racing this Unlock is the caller's own race).
	if errors.Is(err, errResentRelease) && l.validAt(sent) {
		// The lock was ours when the release went out, so the likeliest
		// reason the second sending found it gone is the first sending:
		// the lock was held to the end either way (docs/design.md).
		err = nil
	}
	retried := l.lostInEndNow()
	l.wd.endUnlock(l, err)
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

// observeRelease tells the Observer, if any, how a release went.
func (l *Lease) observeRelease(ctx context.Context, err error) {
	if o := l.cfg.observer; o != nil {
		o.Released(ctx, l.info(), err)
	}
}

// standing reads, under the watchdog's lock, l's hold deadline (zero:
// none), its validity deadline, and whether it was lost (why).
func (l *Lease) standing() (holdUntil, validUntil time.Time, lost error) {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	return l.holdUntil, l.validUntil, l.err
}

// endAs ends l, whose renewal beginUnlock stopped, as replaced: its lock
// now belongs to another lease (a downgrade's), which err names.
func (w *watchdog) endAs(l *Lease, err error) {
	w.mu.Lock()
	l.state = leaseReleased
	l.err = err
	l.closeDoneLocked()
	w.mu.Unlock()
	w.poke()
}

// loseEnding declares l, whose renewal beginUnlock stopped, lost: the
// operation that was to end it found the lock gone.
func (w *watchdog) loseEnding(l *Lease, reason string) {
	w.mu.Lock()
	funcs := w.loseLocked(l, reason)
	l.state = leaseReleased
	w.mu.Unlock()
	runLossFuncs(funcs, l)
	w.poke()
}
