package dlock

import (
	"context"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/hold"
	"github.com/dlock-go/dlock/internal/ownerid"
)

// Lease is a held lock, returned by a successful TryLock or Lock. It stays
// valid until Unlock, or until it is lost: then Done closes and Err says why.
// While auto-renew is on (the default) the Client's watchdog renews it every
// TTL/3. A Lease is safe for concurrent use. The holder must call Unlock
// (Client.Do does it for you); a lease that is never unlocked expires one TTL
// after its last renewal.
type Lease struct {
	s         hold.Lease // its state, renewal and loss: internal/hold owns them
	h         holder
	cfg       *config
	token     int64
	grantedAt time.Time     // when this process got the lease
	handoff   time.Duration // grant on the server to arrival here; 0 unknown
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
	v := l.s.Owner()
	if l.h.kind() == KindReentrant {
		v = v[ownerid.IDLen:] // the lease's owner names the hold: its hold id, then the owner value
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
	return l.s.Done()
}

// Err returns nil while the lease is held. Once the lock is lost it returns
// an error matching ErrLockLost that says why; after Unlock, one matching
// ErrNotHeld. It compares the local validity deadline (monotonic clock) when
// called, so a check right before a write is as good as the local clock
// allows, even just after the process was paused.
func (l *Lease) Err() error {
	l.expireIfDue()
	return l.s.Err()
}

// Extend sets the lock's remaining time to ttl (between MinTTL and MaxTTL)
// and makes ttl the lease's TTL for later renewals; under WithMaxHold, the
// key still expires at the hold's end, ttl or not. A renewal or another
// Extend of the lease in flight goes first: Extend waits for it, as long as
// ctx allows (then the error matches ctx's). It returns ErrNotHeld if the
// lock is no longer the lease's, or when the WithMaxHold cap is less than
// MinTTL away (the lease is then lost); it never re-creates an expired key.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if err := checkTTL(ttl); err != nil {
		return errs.Errorf("dlock: Extend %q: %w", l.Name(), err)
	}
	return l.s.Extend(ctx, ttl)
}

// TTL returns the lock's remaining time as the Redis server sees it. It
// returns ErrNotHeld if the lock is no longer the lease's (the lease is then
// lost).
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) { return l.s.TTL(ctx) }

// expireIfDue declares the lease lost when its validity deadline has
// passed (hold.Lease.ExpireIfDue); a MultiLock's deadlines are its locks':
// their loss is its loss.
func (l *Lease) expireIfDue() {
	if h, ok := l.h.(*multiHolder); ok {
		for _, p := range h.parts {
			p.expireIfDue()
		}
		return
	}
	l.s.ExpireIfDue()
}

// onLoss arranges for f to be called with the loss error if the lease is
// lost; at once if it already was.
func (l *Lease) onLoss(f func(error)) hold.LossID { return l.s.OnLoss(f) }

// lostWhileHeld returns the loss, if any, unless a failed Unlock declared
// it: the lock was then held until the release was sent.
func (l *Lease) lostWhileHeld() error { return l.s.LostWhileHeld() }

// leaseHost is a Lease as its hold.Lease sees it (hold.Host): the lock it
// holds, and the Observer and logger that hear of renewals and loss.
type leaseHost Lease

func (e *leaseHost) Holder() hold.Holder { return e.h }

func (e *leaseHost) Name() string { return e.h.lockName() }

func (e *leaseHost) Lost(err error, reason string) {
	l := (*Lease)(e)
	if a, ok := l.h.(*anchor); ok {
		a.forget()
	}
	if o := l.cfg.observer; o != nil {
		o.Lost(l.info(), err)
	}
	l.cfg.logger.Warn("dlock: lock lost", slog.String("lock", l.Name()), slog.String("kind", string(l.h.kind())),
		slog.Int64("token", l.token), slog.String("reason", reason))
}

// Unnested: a reentrant owner's anchor ended with its last hold.
func (e *leaseHost) Unnested() {
	if a, ok := e.h.(*anchor); ok {
		a.forget()
	}
}

func (e *leaseHost) Renewed(err error) {
	l := (*Lease)(e)
	if o := l.cfg.observer; o != nil {
		o.Renewed(l.info(), err)
	}
}

func (e *leaseHost) RenewFailed(err error, validFor time.Duration) {
	l := (*Lease)(e)
	l.cfg.logger.Warn("dlock: renewal failed; retrying", slog.String("lock", l.Name()), slog.String("kind", string(l.h.kind())),
		slog.Int64("token", l.token), slog.Duration("valid_for", validFor), slog.Any("error", err))
}

// holdSettings are what a lease takes from c.
func (c *config) holdSettings() hold.Settings {
	return hold.Settings{TTL: c.ttl, AutoRenew: c.autoRenew, MaxHold: c.maxHold,
		Replicas: c.replicaAck, ReplicaTimeout: c.replicaAckTimeout}
}

// hold ends a lease whose capped Extend falls below MinTTL: the two agree,
// or this does not compile.
var _ = [1]struct{}{}[MinTTL-hold.MinTTL]
