package hold

import (
	"context"
	"time"
)

type state uint8

const (
	held state = iota
	unlocking
	released
)

// Lease is the state of one held lock: whether it is held, being unlocked,
// released or lost, until when it is valid, and when it is next renewed.
// The layer above embeds it by value in its own lease, so that a grant costs
// one allocation, and sets it up with Init or Start before sharing it. Its
// methods are safe for concurrent use.
type Lease struct {
	wd     *Watchdog
	host   Host
	owner  string
	parent *Lease // renews this lease's lock (a nested hold); its loss is this lease's
	// replicas and replicaTimeout: Settings.Replicas and ReplicaTimeout.
	replicas       int
	replicaTimeout time.Duration

	// Guarded by wd.mu. The booleans come last, packed into one word: the
	// Lease shares its allocation with the layer above's.
	ttl        time.Duration
	holdUntil  time.Time // zero: no cap on the total hold
	grantedAt  time.Time // when Start heard of the grant; zero after Init
	recordedAt time.Time // when a renewal batch last recorded it (record.go)
	validFrom  time.Time // start of the request that set validUntil
	validUntil time.Time // local validity deadline, on the monotonic clock
	nextRenew  time.Time // zero: no renewal planned
	renewing   chan struct{}
	lastErr    error         // the last renewal failure
	err        error         // non-nil once lost, or the error EndAs gave
	done       chan struct{} // made by the first Done: most holders never ask
	lossFuncs  []lossFunc    // on lossSlots until more than fit there
	heapIndex  int
	eventAt    time.Time
	// lossSlots hold the first loss callbacks (a MultiLock's lock has one):
	// a slice of their own would be an allocation per grant.
	lossSlots [2]lossFunc
	// kin links a parent's nested holds (nest.go): a parent's first, a
	// nested hold's next. holds counts them, releasing those of them being
	// released; both are a parent's.
	kin              *Lease
	holds, releasing int32
	state            state
	paused           bool // a parent's renewals wait for its holds' releases
	adopted          bool // a nested hold counted by its parent
	lastHold         bool // a nested hold whose release may end its parent's lock
	autoRenew        bool
	capped           bool // the current grant reaches holdUntil: no more renewals
	endedAs          bool // EndAs ended it: err says what replaced it
	doneClosed       bool
	lostInEnd        bool // err was declared by a failed Unlock (EndUnlock), not while held
}

// Init makes l the lease of owner's hold of host's lock, watched by wd;
// with a parent, l is a nested hold whose lock parent renews. A lease that
// only Init set up is never renewed by itself: a nested hold's, or one made
// of other leases (a MultiLock's).
func (l *Lease) Init(wd *Watchdog, host Host, owner string, s Settings, parent *Lease) {
	*l = Lease{wd: wd, host: host, owner: owner, parent: parent, replicas: s.Replicas,
		replicaTimeout: s.ReplicaTimeout, ttl: s.TTL, autoRenew: s.AutoRenew, heapIndex: -1}
}

// Start is Init for a lease granted for px by a request sent at from (or
// the last one that found it not granted yet): its validity and hold cap
// count from then. Track hands it to the Watchdog.
func (l *Lease) Start(wd *Watchdog, host Host, owner string, s Settings, from time.Time, px time.Duration) {
	l.Init(wd, host, owner, s, nil)
	// Not from: a waiter's from may be a poll long before its grant, and
	// the hold's age (recordCallsLocked) must not count that wait.
	l.grantedAt = time.Now()
	if s.MaxHold > 0 {
		l.holdUntil = from.Add(s.MaxHold)
	}
	l.applyValidityLocked(from, px) // not shared yet: no lock needed
}

// NeedsClaim reports whether a lease that Start granted for px must claim
// the full TTL before it is returned. A grant shorter than the TTL is a
// hand-off's claim window. The Watchdog renews it soon, but a lease that
// won't be renewed, or whose conservative validity is nearly spent (this
// process was slow to hear of the grant), claims it at once; so does one
// that replicas must acknowledge, since the releaser's connection wrote the
// grant and only a write of ours can be waited for.
func (l *Lease) NeedsClaim(from time.Time, px time.Duration) bool {
	return px < l.cappedLocked(l.ttl, from) && (!l.autoRenew || l.replicas > 0 || time.Until(l.validUntil) < px/4)
}

// Claim re-arms a lease's hold to the full TTL before the lease is
// returned (NeedsClaim): the Holder's error, or nil.
func (l *Lease) Claim(ctx context.Context) error {
	start := time.Now()
	px := l.cappedLocked(l.ttl, start) // not shared yet: no lock needed
	if err := l.renewHold(ctx, px, l.shortensLocked(start, px)); err != nil {
		return err
	}
	l.applyValidityLocked(start, px)
	return nil
}

// Track hands a lease that Start made to its Watchdog, which renews it and
// watches its deadline; errs.ErrClosed after the Watchdog's Close.
func (l *Lease) Track() error { return l.wd.track(l) }

// Owner is the owner value the lease's renewals name.
func (l *Lease) Owner() string { return l.owner }

// Done returns a channel that is closed when the lease ends: lost, released
// or ended by EndAs.
func (l *Lease) Done() <-chan struct{} {
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

// Err returns nil while the lease is held; the loss once it is lost;
// ErrReleased once released; what EndAs gave once ended by it.
func (l *Lease) Err() error {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	switch {
	case l.err != nil:
		return l.err
	case l.state == released:
		return ErrReleased
	}
	return nil
}

// Lost returns the loss (or EndAs's error), nil if there is none.
func (l *Lease) Lost() error {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	return l.err
}

// LostInEnd reports whether a failed release ended the lease (a retried
// Unlock is under way).
func (l *Lease) LostInEnd() bool {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	return l.lostInEnd
}

// LostWhileHeld returns the loss, if any, unless a failed Unlock declared
// it: the lock was then held until the release was sent.
func (l *Lease) LostWhileHeld() error {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	if l.lostInEnd {
		return nil
	}
	return l.err
}

// ReleasedByUnlock reports whether an Unlock of the lease released its lock.
func (l *Lease) ReleasedByUnlock() bool {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	return l.state == released && l.err == nil
}

// Unlocking reports whether an Unlock of the lease is under way.
func (l *Lease) Unlocking() bool {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	return l.state == unlocking
}

// Standing reads l's hold deadline (zero: none), its validity deadline, and
// whether it was lost (why), at once.
func (l *Lease) Standing() (holdUntil, validUntil time.Time, lost error) {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	return l.holdUntil, l.validUntil, l.err
}

// Validity returns when the request that set l's validity was sent, and
// the validity deadline it set.
func (l *Lease) Validity() (from, until time.Time) {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	return l.validFrom, l.validUntil
}

// SetValidUntil moves the validity deadline of the lease that renews l's
// lock (l, or a nested hold's parent) without telling the Watchdog, as a
// paused process would find it: a test hook.
func (l *Lease) SetValidUntil(t time.Time) {
	for l.parent != nil {
		l = l.parent
	}
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	l.validUntil = t
}
