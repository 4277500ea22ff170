package dlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/hold"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/protocol"
)

// reentrantOwner is the anchor's holder: the lock as held by one owner,
// renewed once for all its holds.
type reentrantOwner ReentrantMutex

var (
	_ batchRenewer = (*reentrantOwner)(nil)
	_ recorder     = (*reentrantOwner)(nil)
)

func (o *reentrantOwner) lockName() string { return o.name }

func (o *reentrantOwner) kind() Kind { return KindReentrant }

func (o *reentrantOwner) RenewCalls(owner string, px time.Duration, shorten bool) []*driver.Call {
	// The holds set lives and dies with the lock.
	return protocol.OwnedExtend(o.keys.lock, o.holds, owner, px, shorten).Batch()
}

func (o *reentrantOwner) RenewResult(calls []*driver.Call) error { return protocol.ExtendResult(calls) }

func (o *reentrantOwner) RecordCalls(owner string, age, retention time.Duration) []*driver.Call {
	return []*driver.Call{protocol.HeldRecord(o.keys.held, owner, age, retention)}
}

func (o *reentrantOwner) Renew(ctx context.Context, owner string, px time.Duration, shorten bool) error {
	return renewVia(ctx, o.c.drv, o, owner, px, shorten)
}

func (o *reentrantOwner) Remaining(ctx context.Context, owner string) (time.Duration, error) {
	return protocol.OwnedPTTL(ctx, o.c.drv, o.keys.lock, owner)
}

// release is never used: holds are released one by one through their own
// leases, and the anchor retires with the last of them.
func (o *reentrantOwner) release(context.Context, string) error { return nil }

// anchorKey identifies one grant of a reentrant lock to an owner: grant is
// the value the lock's key holds while it lasts (reentrantHold.grantValue).
type anchorKey struct{ lock, grant string }

// anchorOwner is a lock and one of its owner values.
type anchorOwner struct{ lock, owner string }

// owner is the owner value of k's grant (after its hold id).
func (k anchorKey) owner() anchorOwner {
	return anchorOwner{k.lock, k.grant[ownerid.IDLen:]}
}

// anchorSet is a Client's anchors: for each grant of a reentrant lock to an
// owner of the Client, the internal lease the watchdog renews, and how many
// holds hang on it. A later grant to the same owner, after the earlier one
// vanished (ForceUnlock, eviction), has an anchor of its own: the earlier
// one's renewals fail, and its holds are lost.
type anchorSet struct {
	mu      sync.Mutex
	anchors map[anchorKey]*anchor
	// owners counts the anchors of each lock and owner value, for owns.
	owners map[anchorOwner]int
}

type anchor struct {
	key   anchorKey
	lease Lease // made with the anchor: one allocation for both
	// holds and releasing (guarded by anchorSet.mu) count the holds on the
	// anchor and those of them whose release is in flight.
	holds, releasing int
	// pauseMu orders the decisions to pause and resume the anchor's
	// renewals with the watchdog calls that carry them out; paused (guarded
	// by pauseMu) says the renewals are paused.
	pauseMu sync.Mutex
	paused  bool
}

// attach returns the live anchor for key, or makes one, whose lease create
// starts, and counts one more hold on it.
func (s *anchorSet) attach(key anchorKey, create func(*Lease) error) (*anchor, error) {
	if a := s.join(key); a != nil {
		return a, nil
	}
	a := &anchor{key: key, holds: 1}
	l := &a.lease
	if err := create(l); err != nil { // may claim the lock: a round trip, not under mu
		return nil, err
	}
	s.mu.Lock()
	if b := s.joinLocked(key); b != nil {
		s.mu.Unlock()
		// Another hold made one meanwhile; it renews the same key.
		l.s.Retire()
		return b, nil
	}
	if s.anchors == nil {
		s.anchors = make(map[anchorKey]*anchor)
		s.owners = make(map[anchorOwner]int)
	}
	if lost := s.anchors[key]; lost != nil {
		s.deleteLocked(lost) // its loss's forget finds it gone
	}
	s.anchors[key] = a
	s.owners[key.owner()]++
	s.mu.Unlock()
	l.s.OnLoss(func(error) { s.forget(a) })
	return a, nil
}

// join counts one more hold on key's live anchor, if there is one.
func (s *anchorSet) join(key anchorKey) *anchor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.joinLocked(key)
}

// joinLocked is join with s.mu held.
func (s *anchorSet) joinLocked(key anchorKey) *anchor {
	if a := s.anchors[key]; a != nil && a.lease.s.Lost() == nil {
		a.holds++
		return a
	}
	return nil
}

// beginRelease counts one more release in flight on a. When every hold on
// a is then being released, any of these releases may be the owner's last
// (last): a's renewals stop (waiting for one in flight) before it is sent.
// endRelease resumes them when a release leaves a hold that is not being
// released. It fails when ctx ends while a renewal in flight is waited for;
// endRelease follows it either way.
func (s *anchorSet) beginRelease(ctx context.Context, a *anchor) (last bool, err error) {
	a.pauseMu.Lock()
	defer a.pauseMu.Unlock()
	s.mu.Lock()
	a.releasing++
	last = a.releasing >= a.holds && s.anchors[a.key] == a
	pause := !a.paused && last
	s.mu.Unlock()
	if !pause {
		return last, nil
	}
	err = a.lease.s.BeginUnlock(ctx, true)
	switch {
	case err == nil:
		a.paused = true
	case hold.IsRenewalPending(err):
		return last, err
	}
	return last, nil // lost or retired meanwhile: the release finds out
}

// owns reports whether owner, an owner value, holds the lock: whether it
// has an anchor, which a grant's first hold makes and its last retires.
func (s *anchorSet) owns(lock, owner string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owners[anchorOwner{lock, owner}] > 0
}

func (s *anchorSet) deleteLocked(a *anchor) {
	delete(s.anchors, a.key)
	o := a.key.owner()
	if s.owners[o]--; s.owners[o] <= 0 {
		delete(s.owners, o)
	}
}

// endRelease counts a release done, and with ended (the hold is gone) or
// failed (its release may not have landed) one hold less on a: the last
// hold retires a. A hold granted meanwhile keeps it: the
// anchor renews the key by owner, whichever grant put the owner there (and
// renews again if it was paused). When the last hold's release failed, the
// release may not have landed: a ends lost, unrenewed, and the lock expires
// within its TTL, as a Mutex's does after a failed release. (Counted on,
// the failed hold kept the lock renewed for as long as the process lived,
// with no Lease left to release it.)
func (s *anchorSet) endRelease(a *anchor, ended bool, failed error) {
	a.pauseMu.Lock()
	defer a.pauseMu.Unlock()
	s.mu.Lock()
	a.releasing--
	if ended || failed != nil {
		a.holds--
	}
	current := s.anchors[a.key] == a
	last := current && a.holds <= 0
	if last {
		s.deleteLocked(a)
	}
	resume := !last && a.paused && (a.holds > a.releasing || !current)
	s.mu.Unlock()
	l := &a.lease.s
	switch {
	case last && failed != nil && a.paused:
		l.EndUnlock(failed) // ends it lost
	case last && failed != nil:
		// Not Retire, which would wait for the renewal in flight that a
		// silent server has kept from returning.
		l.Lose(fmt.Sprintf("releasing the owner's last hold failed (%v), and the release may still reach Redis", failed))
	case last && a.paused:
		l.EndUnlock(nil)
	case last:
		l.Retire()
	case resume:
		l.Resume()
	default:
		return
	}
	a.paused = false
}

func (s *anchorSet) forget(a *anchor) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.anchors[a.key] == a {
		s.deleteLocked(a)
	}
}
