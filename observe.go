package dlock

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
)

// Observer receives what happens to a Client's locks, for metrics and
// traces: the package github.com/dlock-go/dlock/dlockotel turns it into
// OpenTelemetry instruments and spans. Set one with WithObserver; without
// one, nothing is measured and nothing costs anything.
//
// Methods are called on the locking goroutine (AcquireStart, the returned
// function, Released) or on the watchdog's (Renewed, Lost), synchronously:
// they must be safe for concurrent use, fast, and must not call back into
// the lock that reports.
type Observer interface {
	// AcquireStart is called when an acquire (TryLock, Lock, RLock,
	// Acquire, ...) begins. The context it returns is the one the acquire
	// runs with, so a span started here covers the Redis commands it sends.
	// The returned function is called once, with the outcome.
	AcquireStart(ctx context.Context, a Acquisition) (context.Context, func(AcquireOutcome))
	// Renewed is called after each renewal of a lease by the watchdog: err
	// is nil when it extended the lease.
	Renewed(l LeaseInfo, err error)
	// Lost is called once when a lease is lost; err says why and matches
	// ErrLockLost.
	Lost(l LeaseInfo, err error)
	// Released is called after Unlock (Release for permits) with its
	// result; LeaseInfo.Held says how long the lock was held.
	Released(ctx context.Context, l LeaseInfo, err error)
}

// Acquisition describes an acquire that begins.
type Acquisition struct {
	// Name is the lock's name; for a MultiLock, its names, sorted and
	// joined by commas.
	Name string
	// Kind is the kind of lock: KindMutex (also for FairMutex and
	// MultiLock), KindReentrant, KindRWMutex or KindSemaphore.
	Kind Kind
	// Op is the method: "TryLock", "Lock", "TryRLock", "RLock",
	// "TryAcquire" or "Acquire".
	Op string
}

// AcquireOutcome is how an acquire ended.
type AcquireOutcome struct {
	// Err is nil when the lock was obtained; otherwise it is what the call
	// returned (matching ErrNotObtained for contention or a wait that ran
	// out, ErrClosed, ErrKeyConflict, or a Redis failure).
	Err error
	// Token is the obtained lease's fencing token.
	Token int64
	// Waited is how long the call took.
	Waited time.Duration
	// Attempts is how many times the call asked Redis. Goroutines of one
	// Client waiting for one Mutex take turns asking (the first in line
	// does), so most of them ask once or not at all.
	Attempts int
	// Handoff is, for a lock handed over by a release (rather than found
	// free), the time from the grant on the server to its arrival here. It
	// is measured against the Redis server's clock, so it means something
	// only when that clock and this host's agree. Between goroutines of
	// one Client it is measured on this host's clock alone, from the reply
	// of the release (or of a local hand-off's transfer) to the waiter's
	// wake-up. Zero when unknown: a waiter that learns of its grant from
	// its own request's reply, not from the release.
	Handoff time.Duration
}

// LeaseInfo describes a lease in Observer events.
type LeaseInfo struct {
	// Name is the lease's lock name, as Lease.Name returns it.
	Name string
	// Kind is the kind of lock the lease holds, as in Acquisition.Kind.
	Kind Kind
	// Token is the lease's fencing token, as Lease.Token returns it.
	Token int64
	// Held is how long the lease had been held when the event happened.
	Held time.Duration
}

// WithObserver sets the Observer that a Client's locks report to; see
// package dlockotel for OpenTelemetry. o must not be nil. Default: none.
func WithObserver(o Observer) Option {
	return func(c *config) {
		if o == nil {
			c.fail(errs.InvalidArgf("WithObserver(nil)"))
			return
		}
		c.observer = o
	}
}

// acquireStats counts the attempts of one observed acquire; it travels in
// the acquire's context (only when an Observer is set).
type acquireStats struct{ attempts atomic.Int64 }

type acquireStatsKey struct{}

// countAttempt notes one attempt of the acquire running under ctx.
func countAttempt(ctx context.Context, cfg *config) {
	if cfg.observer == nil {
		return
	}
	if s, ok := ctx.Value(acquireStatsKey{}).(*acquireStats); ok {
		s.attempts.Add(1)
	}
}

// acquireOp names an acquire for the Observer: Lock when it waits.
func acquireOp(wait bool) string {
	if wait {
		return "Lock"
	}
	return "TryLock"
}

// observeAcquire runs acquire under cfg's Observer. Callers check that
// there is one first, so that the unobserved path stays free.
func observeAcquire(ctx context.Context, cfg *config, kind Kind, name, op string,
	acquire func(context.Context) (*Lease, error)) (*Lease, error) {
	start := time.Now()
	stats := &acquireStats{}
	ctx, done := cfg.observer.AcquireStart(context.WithValue(ctx, acquireStatsKey{}, stats),
		Acquisition{Name: name, Kind: kind, Op: op})
	l, err := acquire(ctx)
	out := AcquireOutcome{Err: err, Waited: time.Since(start), Attempts: int(stats.attempts.Load())}
	if l != nil {
		out.Token, out.Handoff = l.token, l.handoff
	}
	done(out)
	return l, err
}

// info describes the lease for Observer events.
func (l *Lease) info() LeaseInfo {
	return LeaseInfo{Name: l.Name(), Kind: l.h.kind(), Token: l.token, Held: time.Since(l.grantedAt)}
}
