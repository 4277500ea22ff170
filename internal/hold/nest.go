package hold

import (
	"fmt"
)

// A parent lease renews the lock of its nested holds (a reentrant owner's
// holds of one grant, each with a Lease of its own that Init gave the
// parent) and ends with the last of them. The parent counts the holds it
// adopted and those of them being released, under wd.mu as the rest of a
// lease's state, so that a nested hold's BeginUnlock and EndUnlock do the
// parent's part in the same step as their own:
//   - while every hold counted is being released, any of these releases
//     may be the owner's last: the parent's renewals pause, and each such
//     release waits for the renewal in flight before it is sent, so that
//     no renewal follows the owner's last release;
//   - a release that leaves a hold not being released resumes them;
//   - the last hold to end ends the parent: released with it, or lost when
//     its release failed and may still reach Redis (the lock then expires
//     within its TTL, as a Mutex's does after a failed release);
//   - the parent's loss is every adopted hold's.

// Unnester is a parent's Host that hears, after wd.mu is released, that
// the last of its nested holds ended it (released, not lost: Host.Lost
// tells of a loss).
type Unnester interface {
	Unnested()
}

// AdoptFirst makes l, which Init set up with a parent, the parent's first
// nested hold, before the parent is shared: before Track, and before any
// other goroutine can reach it.
func (l *Lease) AdoptFirst() { l.parent.adoptLocked(l) }

// Adopt makes l, which Init set up with a parent, one more nested hold of
// the parent. It reports false, adopting nothing, when the parent was lost
// or ended by its last hold.
func (l *Lease) Adopt() bool {
	w := l.wd
	w.mu.Lock()
	defer w.mu.Unlock()
	p := l.parent
	if p.err != nil || p.state == released {
		return false
	}
	p.adoptLocked(l)
	return true
}

// Readopt moves l, a nested hold adopted by a parent that no other
// goroutine has reached yet, to p: another parent of the same lock, made
// meanwhile. It reports false, moving nothing, when l is no longer adopted
// (its parent was lost) or p was lost or ended. The parent l leaves has
// no holds then, for the caller to Retire.
func (l *Lease) Readopt(p *Lease) bool {
	w := l.wd
	w.mu.Lock()
	defer w.mu.Unlock()
	if !l.adopted || p.err != nil || p.state == released {
		return false
	}
	l.parent.unlinkLocked(l)
	l.parent = p
	p.adoptLocked(l)
	return true
}

func (p *Lease) adoptLocked(l *Lease) {
	l.kin, p.kin = p.kin, l
	p.holds++
	l.adopted = true
}

// ReleasesLast reports whether the release that the latest BeginUnlock of
// l, a nested hold, was for may be its owner's last: every hold of its
// parent was being released then. Only the goroutine that called
// BeginUnlock may ask, before its EndUnlock.
func (l *Lease) ReleasesLast() bool { return l.lastHold }

// beginReleaseLocked counts the release of l, an adopted nested hold,
// pausing its parent's renewals when every hold is being released. It
// returns the renewal in flight that the release must wait for, if any.
func (l *Lease) beginReleaseLocked() (renewing chan struct{}) {
	p := l.parent
	p.releasing++
	l.lastHold = p.releasing >= p.holds
	if !l.lastHold {
		return nil
	}
	if !p.paused {
		p.paused = true
		p.state = unlocking
		if p.heapIndex >= 0 {
			p.wd.leases.remove(p.heapIndex)
		}
	}
	return p.renewing
}

// endReleaseLocked uncounts l, an adopted nested hold whose release is
// over (failed: it may not have landed), and does the parent's part:
// resume its renewals, or end it with its last hold. It returns the
// parent's loss callbacks to run, and whether the parent ended or resumed.
func (l *Lease) endReleaseLocked(failed error) (funcs []func(error), ended, resumed bool) {
	p := l.parent
	p.unlinkLocked(l)
	p.releasing--
	switch {
	case p.holds == 0 && failed != nil:
		return p.loseLocked(fmt.Sprintf("releasing the owner's last hold failed (%v), and the release may still reach Redis", failed)), false, false
	case p.holds == 0:
		if p.heapIndex >= 0 {
			p.wd.leases.remove(p.heapIndex)
		}
		p.state = released
		p.closeDoneLocked()
		return nil, true, false
	}
	return p.resumeIfHeldLocked()
}

// cancelReleaseLocked uncounts the release of l, an adopted nested hold,
// that was not sent: l stays adopted.
func (l *Lease) cancelReleaseLocked() (funcs []func(error), resumed bool) {
	l.parent.releasing--
	funcs, _, resumed = l.parent.resumeIfHeldLocked()
	return funcs, resumed
}

// resumeIfHeldLocked resumes p's paused renewals once a hold it counts is
// not being released.
func (p *Lease) resumeIfHeldLocked() (funcs []func(error), ended, resumed bool) {
	if !p.paused || p.releasing >= p.holds {
		return nil, false, false
	}
	p.paused = false
	p.state = held
	return p.watchAgainLocked(), false, true
}

// unlinkLocked uncounts l, one of p's nested holds.
func (p *Lease) unlinkLocked(l *Lease) {
	for at := &p.kin; *at != nil; at = &(*at).kin {
		if *at == l {
			*at = l.kin
			break
		}
	}
	l.kin = nil
	l.adopted = false
	p.holds--
}

// loseKinLocked declares p's nested holds lost with p, whose loss is err,
// and uncounts them. It returns a callback per hold that runs the hold's
// loss callbacks, for after wd.mu is released.
func (p *Lease) loseKinLocked(err error) []func(error) {
	var funcs []func(error)
	for k := p.kin; k != nil; {
		next := k.kin
		k.kin, k.adopted = nil, false
		if kf := k.loseLocked(fmt.Sprintf("the owner's hold ended: %v", err)); len(kf) > 0 {
			k := k
			funcs = append(funcs, func(error) { k.runLoss(kf) })
		}
		k = next
	}
	p.kin, p.holds, p.releasing, p.paused = nil, 0, 0, false
	return funcs
}
