package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
)

// holder is the lock side of a lease: how to renew, release and read what
// the lease holds. Each primitive implements it once.
type holder interface {
	lockName() string
	// renew re-arms the hold for px: nil when renewed, ErrNotHeld when the
	// hold is no longer owner's, or the failure. Unless shorten is set, it
	// never moves the hold's expiry on the server earlier (see
	// Lease.shortensLocked).
	renew(ctx context.Context, owner string, px time.Duration, shorten bool) error
	// release gives the hold up: nil when released, ErrNotHeld when it was
	// not owner's any more, or the failure.
	release(ctx context.Context, owner string) error
	// remaining returns the hold's remaining time on the server, or
	// ErrNotHeld.
	remaining(ctx context.Context, owner string) (time.Duration, error)
}

// unlocker is a holder whose Unlock differs from its release: a Mutex may
// hand the lock to a waiter of its own Client (contend.go).
type unlocker interface {
	unlock(ctx context.Context, owner string) error
}

// batchRenewer is a holder whose renewal is a set of script calls on the
// Client's driver, so the watchdog can pipeline many leases' renewals into
// one round trip. Holders that renew elsewhere (Redlock's nodes) only
// implement holder.renew.
type batchRenewer interface {
	// renewCalls returns the calls that re-arm the hold for px, as
	// holder.renew: one for a lock on one slot, one per slot for a lock
	// spanning several.
	renewCalls(owner string, px time.Duration, shorten bool) []*driver.Call
	// renewResult interprets finished renewCalls like holder.renew.
	renewResult(calls []*driver.Call) error
}

// renewVia renews through renewCalls on d: holder.renew for batchRenewers.
func renewVia(ctx context.Context, d driver.Driver, b batchRenewer, owner string, px time.Duration, shorten bool) error {
	calls := b.renewCalls(owner, px, shorten)
	d.Run(ctx, calls...)
	return b.renewResult(calls)
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
	if h, ok := l.h.(*reentrantHold); ok {
		v = h.owner // l.owner names the hold: its hold id, then the owner value
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

// expireIfDue declares the lease lost when its validity deadline has
// passed, as the watchdog would at its next step: the watchdog may not have
// run since (GC, a paused process). A nested hold's deadline is its
// parent's, and a MultiLock's its locks': their loss is its loss.
func (l *Lease) expireIfDue() {
	if h, ok := l.h.(*multiHolder); ok {
		for _, p := range h.parts {
			p.expireIfDue()
		}
		return
	}
	root := l
	for root.parent != nil {
		root = root.parent
	}
	w := root.wd
	now := time.Now()
	w.mu.Lock()
	if root.err != nil || root.state != leaseHeld || root.validUntil.IsZero() || now.Before(root.validUntil) {
		w.mu.Unlock()
		return
	}
	funcs := w.loseLocked(root, root.deadlineReasonLocked())
	w.mu.Unlock()
	runLossFuncs(funcs, root)
}

// lossErr returns the loss, or nil if the lease was not lost.
func (l *Lease) lossErr() error {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	return l.err
}

// lostInEndNow reports whether a failed release ended the lease (a retried
// Unlock is under way).
func (l *Lease) lostInEndNow() bool {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	return l.lostInEnd
}

// releasedByUnlock reports whether an Unlock of the lease released its lock.
func (l *Lease) releasedByUnlock() bool {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	return l.state == leaseReleased && l.err == nil
}

// unlocking reports whether an Unlock of the lease is under way.
func (l *Lease) unlocking() bool {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	return l.state == leaseUnlocking
}

// lostWhileHeld returns the loss, if any, unless a failed Unlock declared
// it: the lock was then held until the release was sent.
func (l *Lease) lostWhileHeld() error {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	if l.lostInEnd {
		return nil
	}
	return l.err
}

// onLoss arranges for f to be called with the loss error if the lease is
// lost; at once if it already was. It returns the id dropLoss takes.
func (l *Lease) onLoss(f func(error)) lossID {
	l.wd.mu.Lock()
	if err := l.err; err != nil {
		l.wd.mu.Unlock()
		f(err)
		return 0
	}
	l.wd.lossSeq++
	id := l.wd.lossSeq
	l.lossFuncs = append(l.lossFuncs, lossFunc{id: id, f: f})
	l.wd.mu.Unlock()
	return id
}

// dropLoss cancels what onLoss arranged, if it is still to come. A lease
// that outlives many of the things that watch it (a reentrant owner's
// renewal, under nested holds that come and go) must not keep them all.
func (l *Lease) dropLoss(id lossID) {
	if id == 0 {
		return
	}
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	for i, lf := range l.lossFuncs {
		if lf.id == id {
			last := len(l.lossFuncs) - 1
			copy(l.lossFuncs[i:], l.lossFuncs[i+1:])
			l.lossFuncs[last] = lossFunc{} // the slice's tail must not keep f
			l.lossFuncs = l.lossFuncs[:last]
			return
		}
	}
}

// lossFunc is a loss callback, with the id that onLoss gave it.
type lossFunc struct {
	id lossID
	f  func(error)
}

// lossID names a loss callback of a lease; 0 none.
type lossID uint64

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

// validAt reports whether the lease was still valid at t: not lost, and
// before its validity deadline (its parent's, for a nested hold, which
// shares the parent's watchdog).
func (l *Lease) validAt(t time.Time) bool {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	for ; l.err == nil; l = l.parent {
		if l.parent == nil {
			return t.Before(l.validUntil)
		}
	}
	return false
}

// observeRelease tells the Observer, if any, how a release went.
func (l *Lease) observeRelease(ctx context.Context, err error) {
	if o := l.cfg.observer; o != nil {
		o.Released(ctx, l.info(), err)
	}
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
	d, err := l.h.remaining(ctx, l.owner)
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

// usable says why the lease cannot be extended or read, if it can't.
func (l *Lease) usable() error {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	return l.usableLocked()
}

// usableLocked says why the lease cannot be extended or read, if it can't.
func (l *Lease) usableLocked() error {
	switch {
	case l.state != leaseHeld:
		return errReleased
	case l.err != nil:
		return fmt.Errorf("%w: the lease was lost: %v", ErrNotHeld, l.err)
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
// a lease that counts on the longer one (docs/design.md, "Renewals never
// shorten").
func (l *Lease) shortensLocked(now time.Time, px time.Duration) bool {
	return now.Add(px).Before(l.validUntil) || l.reachesCap(now, px)
}

// reachesCap reports whether a grant or renewal of px from from ends at the
// WithMaxHold cap (cappedLocked cut it to the millisecond).
func (l *Lease) reachesCap(from time.Time, px time.Duration) bool {
	return !l.holdUntil.IsZero() && !from.Add(px).Before(l.holdUntil.Add(-time.Millisecond))
}

// drift is the safety margin subtracted from every validity: clocks of the
// client and the server may run at slightly different rates, and expiry has
// millisecond resolution (the Redlock paper's TTL/100 + 2ms).
func drift(px time.Duration) time.Duration { return px/100 + 2*time.Millisecond }

// validityDeadline is when a grant or renewal of px, requested at from,
// stops being trustworthy: px after the request was sent (the server's
// expiry counts from later, so the time the request and its reply took is
// subtracted), less the drift allowance. It is a variable only so that the
// reliability suite can swap in a broken version and prove that its checks
// catch it (export_test.go, docs/reliability.md); nothing else sets it.
var validityDeadline = func(from time.Time, px, drift time.Duration) time.Time {
	return from.Add(px - drift)
}

// drifter is a holder whose leases need another drift allowance than drift:
// Redlock's drift factor is an option.
type drifter interface {
	drift(px time.Duration) time.Duration
}

// driftFor is the drift allowance of this lease's validity.
func (l *Lease) driftFor(px time.Duration) time.Duration {
	if d, ok := l.h.(drifter); ok {
		return d.drift(px)
	}
	return drift(px)
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

func runLossFuncs(funcs []func(error), l *Lease) {
	if len(funcs) == 0 {
		return
	}
	err := l.lossErr()
	for _, f := range funcs {
		f(err)
	}
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
		kind:      kindOf(h),
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

// kindOf names the kind of lock a holder holds, for Observer events.
func kindOf(h holder) Kind {
	switch h.(type) {
	case *reentrantHold, *reentrantOwner:
		return KindReentrant
	case *rwHalf:
		return KindRWMutex
	case *semAcquisition:
		return KindSemaphore
	}
	return KindMutex
}
