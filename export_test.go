package dlock

import (
	"time"

	"github.com/dlock-go/dlock/internal/hold"
)

// Hooks for the reliability suite (chaos_*_test.go, package dlock_test),
// which lives outside the package so that it uses only the public API
// besides these.

// LeaseOwner returns the owner value a lease's key holds, so that the
// suite can tell whose lock a script call (seen by a go-redis hook) or a
// key's value belongs to: for a reentrant hold the owner's value, which
// its holds share (the key holds the grant's hold id before it); for an
// RWMutex the member, mode and owner.
func LeaseOwner(l *Lease) string {
	switch h := l.h.(type) {
	case *reentrantHold:
		return h.owner
	case *rwHalf:
		return h.member(l.s.Owner())
	}
	return l.s.Owner()
}

// PermitsLease returns the lease that holds a semaphore's permits, so that
// the suite records them like any lease.
func PermitsLease(p *Permits) *Lease { return p.l }

// LeaseValidUntil returns the lease's local validity deadline.
func LeaseValidUntil(l *Lease) time.Time {
	_, until := l.s.Validity()
	return until
}

// MutateValidityIgnoringElapsed makes every validity count from when the
// reply arrived rather than from when the request was sent: the "validity
// without subtracting elapsed time" mutant. It returns the function that
// puts the correct computation back. Call it before any Client exists, and
// restore it after every Client is closed.
func MutateValidityIgnoringElapsed() (restore func()) {
	return hold.SetValidityDeadline(func(from time.Time, px, drift time.Duration) time.Time {
		return time.Now().Add(px - drift)
	})
}

// RedlockGateState returns how many Lock calls of r are in line for the
// lock called name (redlock_wait.go), and what the first in line does:
// "waiting" (attempting, between attempts, or standing by for a hand-off),
// "taken" (a hand-off to it is in flight) or "" (nobody in line). Tests
// line goroutines up with it.
func RedlockGateState(r *Redlock, name string) (users int, head string) {
	key := newLockKeys(r.cfg.keyPrefix, name).lock
	_, users, taken := r.line.Count(func(k string) bool { return k == key })
	switch {
	case users == 0:
		return 0, ""
	case taken:
		return users, "taken"
	}
	return users, "waiting"
}

// RedlockGateHears reports whether the Lock calls for the lock called name
// have a subscription to its releases confirmed on enough of r's nodes to
// hear any holder's (redlockListener.hears): until they have, the head
// asks the nodes rather than wait for a release it might miss.
func RedlockGateHears(r *Redlock, name string) bool {
	key := newLockKeys(r.cfg.keyPrefix, name).lock
	r.ears.mu.Lock()
	e := r.ears.ears[key]
	r.ears.mu.Unlock()
	if e == nil {
		return false
	}
	l := r.listener(e, false)
	return l != nil && l.hears()
}

// RedlockNodeSilent reports whether r counts its node i silent: its last
// request got no reply (redlock_silent.go). Tests wait for it before they
// measure what a silent node does not delay.
func RedlockNodeSilent(r *Redlock, i int) bool {
	return r.nodes[i].health.silentErr() != nil
}

// WaitFor is waitFor (helpers_internal_test.go), the one poll of every test
// in and outside the package.
var WaitFor = waitFor
