package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
)

// Lease is a held lock, returned by a successful TryLock or Lock. It stays
// valid until Unlock, or until it is lost: then Done closes and Err says why.
// While auto-renew is on (the default) the Client's watchdog renews it every
// TTL/3. A Lease is safe for concurrent use. The holder must call Unlock
// (Client.Do does it for you); a lease that is never unlocked expires one TTL
// after its last renewal.
type Lease struct {
	wd        *watchdog
	h         holder
	cfg       *config
	owner     string
	token     int64
	kind      Kind
	grantedAt time.Time     // when this process got the lease
	handoff   time.Duration // grant on the server to arrival here; 0 unknown
	// parent, when set, is the lease that renews this one's lock: a nested
	// hold of a reentrant lock. Extend and TTL act on it; its loss is this
	// lease's loss.
	parent *Lease

	// Guarded by c.wd.mu.
	ttl        time.Duration
	autoRenew  bool
	holdUntil  time.Time // zero: no cap on the total hold
	validFrom  time.Time // start of the request that set validUntil
	validUntil time.Time // local validity deadline, on the monotonic clock
	nextRenew  time.Time // zero: no renewal planned
	renewing   chan struct{}
	capped     bool  // the current grant reaches holdUntil: no more renewals
	lastErr    error // the last renewal failure
	state      leaseState
	err        error         // non-nil once lost
	done       chan struct{} // made by the first Done: most holders never ask
	doneClosed bool
	lostInEnd  bool // err was declared by a failed Unlock (endUnlock), not while held
	lossFuncs  []lossFunc
	heapIndex  int
	eventAt    time.Time
}

// Name returns the name of the lock the lease holds.
func (l *Lease) Name() string { return l.h.lockName() }

// Token returns the lease's fencing token. Tokens of one lock name strictly
// increase with every grant, so a resource that remembers the highest token
// it has seen can refuse a holder whose lease has already passed to someone
// else (see the package documentation).
//
// Leases from a Redlock have no fencing token: Token returns 0. Independent
// nodes keep no common counter, and no per-node value can be combined into a
// number that increases across grants won on different quorums or after a
// node restart (see the package documentation, "Redlock").
func (l *Lease) Token() int64 { return l.token }

// Owner returns the id of the lease's holder: the Holder.Owner that
// Client.Inspect reports for it, and what Client.ForceUnlockOwner takes to
// release it, from this process or another. For a lease of a Mutex,
// FairMutex, MultiLock or RWMutex it is the acquisition's random id (32 hex
// digits, without the owner info), the same for every lock of a MultiLock;
// a read lease from Downgrade has an id of its own. For a ReentrantMutex it
// is "<client instance id>:<identity>", shared by every hold of that owner
// through the Client, which ForceUnlockOwner releases together. A Redlock
// lease has an id too, but Redlock leases cannot be released through a
// Client. Owner sends nothing and is safe for concurrent use.
func (l *Lease) Owner() string {
	v := l.owner
	if l.kind == KindReentrant {
		v = v[ownerid.IDLen:] // l.owner names the hold: its hold id, then the owner value
	}
	id, _ := ownerid.Split(v) // as Inspect reads Holder.Owner from the value stored
	return id
}

// Done returns a channel that is closed when the lease ends: when the lock is
// lost, or after Unlock. A lease past its local validity deadline is lost
// when Done is called, even if the watchdog has not run since (a process
// that was paused).
func (l *Lease) Done() <-chan struct{} {
	l.expireIfDue()
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	if l.done == nil {
		if l.doneClosed {
			return closedChan
		}
		l.done = make(chan struct{})
	}
	return l.done
}

// closedChan is Done's channel for a lease that ended before anyone asked.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Err returns nil while the lease is held. Once the lock is lost it returns
// an error matching ErrLockLost that says why; after Unlock, one matching
// ErrNotHeld. It compares the local validity deadline (monotonic clock) when
// called, so a check right before a write is as good as the local clock
// allows, even just after the process was paused.
func (l *Lease) Err() error {
	l.expireIfDue()
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	switch {
	case l.err != nil:
		return l.err
	case l.state == leaseReleased:
		return errReleased
	}
	return nil
}

// Extend sets the lock's remaining time to ttl (between MinTTL and MaxTTL)
// and makes ttl the lease's TTL for later renewals; under WithMaxHold, the
// key still expires at the hold's end, ttl or not. A renewal or another
// Extend of the lease in flight goes first: Extend waits for it, as long as
// ctx allows (then the error matches ctx's). It returns ErrNotHeld if the
// lock is no longer the lease's, or when the WithMaxHold cap is less than
// MinTTL away (the lease is then lost); it never re-creates an expired key.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	name := l.Name()
	if err := checkTTL(ttl); err != nil {
		return errs.Errorf("dlock: Extend %q: %w", name, err)
	}
	if l.parent != nil {
		if err := l.usable(); err != nil {
			return errs.Errorf("dlock: Extend %q: %w", name, err)
		}
		return l.parent.Extend(ctx, ttl)
	}
	wd := l.wd
	wd.mu.Lock()
	// One request that sets the key's expiry at a time, per lease: a
	// renewal of the watchdog's or another Extend in flight goes first.
	// Requests on the wire together may reach Redis in either order, and
	// the later one's expiry is the key's, whichever this process heard
	// back from last: a renewal for the old TTL landing after an Extend for
	// a longer one would shorten the key under a lease that counts on the
	// longer validity (docs/design.md, "One expiry request at a time").
	for l.renewing != nil && l.usableLocked() == nil {
		inFlight := l.renewing
		wd.mu.Unlock()
		select {
		case <-inFlight:
		case <-ctx.Done():
			return errs.Errorf("dlock: Extend %q: waiting for the renewal in flight: %w", name, ctx.Err())
		}
		wd.mu.Lock()
	}
	if err := l.usableLocked(); err != nil {
		wd.mu.Unlock()
		return errs.Errorf("dlock: Extend %q: %w", name, err)
	}
	start := time.Now()
	px := l.cappedLocked(ttl, start)
	if px < MinTTL {
		// The key expires within MinTTL, and nothing may renew it: the
		// lease ends now rather than at a deadline moments away.
		lost := wd.loseLocked(l, "the maximum hold time (WithMaxHold) was reached")
		wd.mu.Unlock()
		runLossFuncs(lost, l)
		return errs.Errorf("dlock: Extend %q: %w: the maximum hold time (WithMaxHold) is reached", name, ErrNotHeld)
	}
	shorten := l.shortensLocked(start, px)
	inFlight := make(chan struct{})
	l.renewing = inFlight
	wd.rescheduleLocked(l) // no renewal while this one is in flight
	wd.mu.Unlock()

	err := l.renewHold(ctx, px, shorten)

	wd.mu.Lock()
	close(inFlight)
	l.renewing = nil
	var lost []func(error)
	switch {
	case err == nil:
		l.ttl = ttl
		l.applyValidityLocked(start, px)
		wd.rescheduleLocked(l)
	case errors.Is(err, ErrNotHeld):
		lost = wd.loseLocked(l, "Extend found the key gone or held by another owner")
	default:
		l.distrustLocked(start, px)
		wd.rescheduleLocked(l)
	}
	wd.mu.Unlock()
	runLossFuncs(lost, l)
	switch {
	case err == nil:
		wd.poke()
		return nil
	case errors.Is(err, ErrNotHeld):
		return errs.Errorf("dlock: Extend %q: %w: it expired or was taken over", name, ErrNotHeld)
	}
	wd.poke()
	return errs.Redis("Extend", name, err)
}

// TTL returns the lock's remaining time as the Redis server sees it. It
// returns ErrNotHeld if the lock is no longer the lease's (the lease is then
// lost).
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	name := l.Name()
	if err := l.usable(); err != nil {
		return 0, errs.Errorf("dlock: TTL %q: %w", name, err)
	}
	if l.parent != nil {
		return l.parent.TTL(ctx)
	}
	wd := l.wd
	d, err := l.h.Remaining(ctx, l.owner)
	switch {
	case err == nil:
		return d, nil
	case errors.Is(err, ErrNotHeld):
		wd.mu.Lock()
		if l.state != leaseHeld {
			// An Unlock released it meanwhile: not a loss.
			wd.mu.Unlock()
			return 0, errs.Errorf("dlock: TTL %q: %w", name, errReleased)
		}
		lost := wd.loseLocked(l, "TTL found the key gone or held by another owner")
		wd.mu.Unlock()
		runLossFuncs(lost, l)
		return 0, errs.Errorf("dlock: TTL %q: %w: it expired or was taken over", name, ErrNotHeld)
	}
	return 0, errs.Redis("TTL", name, err)
}
