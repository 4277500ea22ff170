package hold

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/internal/errs"
)

// BeginUnlock stops watching the lease and waits for its renewal in flight,
// so that the release that follows is the last command for this lease.
// When ctx ends first (the release timeout of an Unlock), the error is a
// *RenewalPendingError: the renewal was sent to a server that has not
// answered since, and the release would fare no better. With keep (a
// Downgrade, a reentrant owner's renewal) the lease then goes back to the
// Watchdog, unchanged; without it (an Unlock) it ends lost, unrenewed, so
// that the lock expires within its TTL unless Unlock is called again. A
// lease that EndAs ended returns EndAs's error.
func (l *Lease) BeginUnlock(ctx context.Context, keep bool) error {
	w := l.wd
	w.mu.Lock()
	switch l.state {
	case unlocking:
		w.mu.Unlock()
		return fmt.Errorf("%w: Unlock is already in progress", errs.ErrNotHeld)
	case released:
		err, endedAs := l.err, l.endedAs
		w.mu.Unlock()
		if endedAs {
			return err
		}
		return fmt.Errorf("%w: the lease has already ended (unlocked or released)", errs.ErrNotHeld)
	}
	l.state = unlocking
	if l.heapIndex >= 0 {
		w.leases.remove(l.heapIndex)
	}
	renewing := l.renewing
	l.lastHold = false
	if l.adopted {
		renewing = l.beginReleaseLocked() // its parent's
	}
	w.mu.Unlock()
	if renewing != nil {
		select {
		case <-renewing:
		case <-ctx.Done():
			err := &RenewalPendingError{err: ctx.Err()}
			if keep {
				l.Resume()
			} else {
				l.EndUnlock(err)
			}
			return err
		}
	}
	return nil
}

// RenewalPendingError is a release not sent because a renewal sent before
// it had not returned within the release timeout.
type RenewalPendingError struct{ err error }

func (e *RenewalPendingError) Error() string {
	return "a renewal sent earlier has not returned within the release timeout, so the release was not sent: " +
		"Redis is not answering; the lock expires within its TTL, or call Unlock again: " + e.err.Error()
}

func (e *RenewalPendingError) Unwrap() error { return e.err }

// IsRenewalPending reports whether err is, or wraps, a RenewalPendingError.
// (A pointer declared for errors.As escapes to the heap wherever it is
// declared: in a function of its own, only a failed call pays for it.)
func IsRenewalPending(err error) bool {
	var pending *RenewalPendingError
	return errors.As(err, &pending)
}

// Resume hands a lease that BeginUnlock took from the Watchdog back to it,
// unchanged, when the release or Downgrade it was paused for did not
// happen.
func (l *Lease) Resume() {
	w := l.wd
	w.mu.Lock()
	l.state = held
	if l.adopted && l.parent != nil {
		funcs, _ := l.cancelReleaseLocked()
		w.mu.Unlock()
		l.parent.runLoss(funcs)
		w.poke()
		return
	}
	funcs := l.watchAgainLocked()
	w.mu.Unlock()
	l.runLoss(funcs)
	w.poke()
}

// watchAgainLocked puts a held lease that Unlock or Downgrade took from the
// Watchdog back under its watch; after Close, which declared every lease it
// watched lost, it declares this one lost too, since nothing will renew it
// or close its Done at its deadline. It returns the loss callbacks to run
// after wd.mu is released. Nested holds of a reentrant lock are never
// watched: their parent is.
func (l *Lease) watchAgainLocked() []func(error) {
	switch {
	case l.err != nil || l.parent != nil || l.heapIndex >= 0:
		return nil
	case l.wd.closed:
		return l.loseLocked("the client was closed, so nothing renews it")
	}
	l.eventAt = l.nextEventLocked()
	l.wd.leases.push(l)
	return nil
}

// EndUnlock records the outcome of the release. A failed release ends the
// lease as lost: its request may still reach Redis (a reply lost or late, a
// Redlock node that did not answer in time) and free the lock at any moment,
// so the lease can no longer say that the lock is its own. Unlock can still
// be called again, to make sure the lock is released. retried is what
// LostInEnd said before: read in the same step, since every Unlock asks and
// wd.mu is every lease's.
func (l *Lease) EndUnlock(err error) (retried bool) {
	var (
		funcs, parentFuncs []func(error)
		unnested, resumed  bool
	)
	p := l.parent
	l.wd.mu.Lock()
	if l.adopted && l.state == unlocking {
		var failed error // the release may not have landed
		if !endsHold(err) {
			failed = err
		}
		parentFuncs, unnested, resumed = l.endReleaseLocked(failed)
	}
	retried = l.lostInEnd
	switch {
	case err == nil, errs.ReleasedAnyway(err):
		// A release that freed the lock ends the lease, even when it
		// reports that its hand-off failed (Unlock returns that error).
		l.state = released
		l.closeDoneLocked()
	case errors.Is(err, errs.ErrNotHeld):
		funcs = l.loseLocked("it expired or was taken over before Unlock")
		l.state = released
	default:
		// The release may still land, so the lease cannot go back to
		// being held until its deadline: another owner could then take
		// the lock under a lease that says it is held.
		l.state = held // for the Unlock called again
		l.lostInEnd = l.lostInEnd || l.err == nil
		reason := fmt.Sprintf("releasing it failed (%v), and the release may still reach Redis", err)
		var pending *RenewalPendingError
		if errors.As(err, &pending) {
			reason = fmt.Sprintf("Unlock gave up (%v): nothing renews the lock any more, and it expires within its TTL unless Unlock is called again", pending.err)
		}
		funcs = l.loseLocked(reason)
	}
	l.wd.mu.Unlock()
	l.runLoss(funcs)
	if p != nil {
		p.afterRelease(parentFuncs, unnested, resumed)
	}
	return retried
}

// endsHold reports whether a release that returned err ended the hold:
// released, or no longer there.
func endsHold(err error) bool {
	return err == nil || errs.ReleasedAnyway(err) || errors.Is(err, errs.ErrNotHeld)
}

// afterRelease tells, after wd.mu is released, what a nested hold's
// release did to p, its parent: its loss, its end, its renewals resumed.
func (p *Lease) afterRelease(funcs []func(error), unnested, resumed bool) {
	p.runLoss(funcs)
	if unnested {
		if u, ok := p.host.(Unnester); ok {
			u.Unnested()
		}
	}
	if resumed {
		p.wd.poke()
	}
}

// EndAs ends the lease, whose renewal BeginUnlock stopped, as replaced: its
// lock now belongs to another lease (a downgrade's), which err names. Err
// returns err from then on, and so does a later BeginUnlock.
func (l *Lease) EndAs(err error) {
	l.wd.mu.Lock()
	l.state = released
	l.err = err
	l.endedAs = true
	l.closeDoneLocked()
	l.wd.mu.Unlock()
	l.wd.poke()
}

// LoseEnding declares the lease, whose renewal BeginUnlock stopped, lost:
// the operation that was to end it found the lock gone.
func (l *Lease) LoseEnding(reason string) {
	l.wd.mu.Lock()
	funcs := l.loseLocked(reason)
	l.state = released
	l.wd.mu.Unlock()
	l.runLoss(funcs)
	l.wd.poke()
}
