package hold

import (
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
)

// ExpireIfDue declares the lease lost when its validity deadline has
// passed, as the Watchdog would at its next step: the Watchdog may not have
// run since (GC, a paused process). A nested hold's deadline is its
// parent's: their loss is its loss.
func (l *Lease) ExpireIfDue() {
	root := l
	for root.parent != nil {
		root = root.parent
	}
	w := root.wd
	now := time.Now()
	w.mu.Lock()
	if root.err != nil || root.state != held || root.validUntil.IsZero() || now.Before(root.validUntil) {
		w.mu.Unlock()
		return
	}
	funcs := root.loseLocked(root.deadlineReasonLocked())
	w.mu.Unlock()
	root.runLoss(funcs)
}

// ValidAt reports whether the lease was still valid at t: not lost, and
// before its validity deadline (its parent's, for a nested hold, which
// shares the parent's Watchdog).
func (l *Lease) ValidAt(t time.Time) bool {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	for ; l.err == nil; l = l.parent {
		if l.parent == nil {
			return t.Before(l.validUntil)
		}
	}
	return false
}

// Usable says why the lease cannot be extended or read, if it can't:
// ErrReleased, or an error matching errs.ErrNotHeld that names the loss.
func (l *Lease) Usable() error {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	return l.usableLocked()
}

func (l *Lease) usableLocked() error {
	switch {
	case l.state != held:
		return ErrReleased
	case l.err != nil:
		return fmt.Errorf("%w: the lease was lost: %v", errs.ErrNotHeld, l.err)
	}
	return nil
}

// cappedLocked returns px limited so the hold ends by holdUntil.
func (l *Lease) cappedLocked(px time.Duration, now time.Time) time.Duration {
	if !l.holdUntil.IsZero() {
		if rest := l.holdUntil.Sub(now); rest < px {
			px = rest
		}
	}
	return px.Truncate(time.Millisecond)
}

// shortensLocked reports whether a renewal for px sent at now may move the
// expiry on the server earlier: an Extend to less than the time the lease
// counts on, or a renewal cut short by WithMaxHold, whose cap is a ceiling
// whatever the server holds (an earlier request that landed late may have
// set a later expiry than the lease knows of). Any other request only ever
// lengthens it, so that one overtaken on the wire by a later, longer one
// (its reply lost or late, its context ended) cannot cut the key back under
// a lease that counts on the longer one (docs/holding.md, "Renewals never
// shorten").
func (l *Lease) shortensLocked(now time.Time, px time.Duration) bool {
	return now.Add(px).Before(l.validUntil) || l.reachesCap(now, px)
}

// reachesCap reports whether a grant or renewal of px from from ends at the
// WithMaxHold cap (cappedLocked cut it to the millisecond).
func (l *Lease) reachesCap(from time.Time, px time.Duration) bool {
	return !l.holdUntil.IsZero() && !from.Add(px).Before(l.holdUntil.Add(-time.Millisecond))
}

// Drift is the safety margin subtracted from every validity: clocks of the
// client and the server may run at slightly different rates, and expiry has
// millisecond resolution (the Redlock paper's TTL/100 + 2ms).
func Drift(px time.Duration) time.Duration { return px/100 + 2*time.Millisecond }

// validityDeadline is when a grant or renewal of px, requested at from,
// stops being trustworthy: px after the request was sent (the server's
// expiry counts from later, so the time the request and its reply took is
// subtracted), less the drift allowance. It is a variable only so that the
// reliability suite can swap in a broken version and prove that its checks
// catch it (SetValidityDeadline, docs/reliability.md); nothing else sets it.
var validityDeadline = func(from time.Time, px, drift time.Duration) time.Time {
	return from.Add(px - drift)
}

// SetValidityDeadline replaces how a validity deadline is computed from a
// request's start, the expiry asked for and the drift allowance, and
// returns the function that restores it: a test hook for the reliability
// suite's mutants. Call it while no lease exists.
func SetValidityDeadline(f func(from time.Time, px, drift time.Duration) time.Time) (restore func()) {
	orig := validityDeadline
	validityDeadline = f
	return func() { validityDeadline = orig }
}

// driftFor is the drift allowance of this lease's validity.
func (l *Lease) driftFor(px time.Duration) time.Duration {
	if d, ok := l.host.Holder().(Drifter); ok {
		return d.Drift(px)
	}
	return Drift(px)
}

// distrustLocked handles an Extend that failed but may still have reached
// the servers (a reply lost in transit; a Redlock minority of nodes): if it
// asked for less than the validity in force, the keys may now expire sooner,
// so the validity shrinks to what it asked for, and an auto-renewing lease
// renews at once to restore its TTL.
func (l *Lease) distrustLocked(from time.Time, px time.Duration) {
	until := validityDeadline(from, px, l.driftFor(px))
	if !until.Before(l.validUntil) {
		return
	}
	l.validUntil = until
	if now := time.Now(); l.autoRenew && !l.capped && (l.nextRenew.IsZero() || now.Before(l.nextRenew)) {
		l.nextRenew = now
	}
}

// applyValidityLocked records that the server granted or renewed the key for
// px, by a request sent at from. A result older than the one in force is
// ignored. (Renewals and Extends of a lease are never in flight together,
// see Extend, so their results come back in the order they were applied.)
func (l *Lease) applyValidityLocked(from time.Time, px time.Duration) {
	if from.Before(l.validFrom) {
		return
	}
	l.validFrom = from
	l.validUntil = validityDeadline(from, px, l.driftFor(px))
	l.nextRenew = time.Time{}
	l.capped = l.reachesCap(from, px)
	if !l.autoRenew || l.capped {
		return
	}
	// Renew once a third of the grant's life has passed: of the TTL for a
	// full grant (two more tries fit before the key could expire), of the
	// claim window for a hand-off's short grant, so a short critical
	// section after a hand-off ends before any renewal is due.
	life := px
	if l.ttl < life {
		life = l.ttl
	}
	l.nextRenew = from.Add(life / 3)
}

// deadlineReasonLocked says why a lease reached its deadline.
func (l *Lease) deadlineReasonLocked() string {
	switch {
	case l.capped:
		return "the maximum hold time (WithMaxHold) was reached"
	case !l.autoRenew:
		return "its TTL elapsed (auto-renew is off)"
	case l.lastErr != nil:
		return fmt.Sprintf("no renewal succeeded before the validity deadline (last error: %v)", l.lastErr)
	}
	return "no renewal succeeded before the validity deadline"
}
