package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
)

// Permits are permits held from a Semaphore, returned by a successful
// TryAcquire or Acquire. They stay valid until Release, or until they are
// lost: then Done closes and Err says why. While auto-renew is on (the
// default) the Client's watchdog renews them every TTL/3, like a lock's
// lease. Permits are safe for concurrent use. The holder must call Release;
// permits never released expire one TTL after their last renewal.
type Permits struct {
	l *Lease
	a *semAcquisition // the lease's holder
	// mu lets one ReleaseN at a time read and change the count.
	mu sync.Mutex
	n  atomic.Int64 // the permits held; changed under mu
}

var errPermitsReleased = fmt.Errorf("%w: released by Release", ErrNotHeld)

// Name returns the name of the semaphore the permits are from.
func (p *Permits) Name() string { return p.l.Name() }

// N returns how many permits are held: those acquired, less those given
// back by ReleaseN. Release does not change it. It sends nothing and is
// safe for concurrent use.
func (p *Permits) N() int { return int(p.n.Load()) }

// Token returns the fencing token of this acquisition. Tokens of one
// semaphore strictly increase with every grant, so each acquisition's token
// is unique and later ones are larger. Several holders are valid at once,
// so a resource cannot simply refuse tokens below the highest it has seen;
// it can where each permit guards its own slot or partition (the highest
// token per slot), or use the token to tell a stale holder's writes apart.
func (p *Permits) Token() int64 { return p.l.Token() }

// Owner returns the id of this acquisition, as Lease.Owner does: the
// Holder.Owner that Client.Inspect reports for it, and what
// Client.ForceUnlockOwner takes to release these permits alone, from this
// process or another. It sends nothing and is safe for concurrent use.
func (p *Permits) Owner() string { return p.l.Owner() }

// Done returns a channel that is closed when the permits end: when they are
// lost, or after Release.
func (p *Permits) Done() <-chan struct{} { return p.l.Done() }

// Err returns nil while the permits are held. Once they are lost it returns
// an error matching ErrLockLost that says why; after Release, one matching
// ErrNotHeld.
func (p *Permits) Err() error {
	if err := p.l.Err(); err != errReleased {
		return err
	}
	return errPermitsReleased
}

// Release gives the permits back and ends them; waiters they make room for
// are served at once, in arrival order. It first stops renewal and waits for
// a renewal in flight, so no renewal can follow the release. It runs
// detached from ctx's cancellation (bounded by WithReleaseTimeout), so a
// request whose context is already cancelled still releases its permits. It
// returns ErrNotHeld if the permits had expired or were removed (nobody
// else's permits are touched), or if they were already released.
func (p *Permits) Release(ctx context.Context) error {
	return p.l.end(ctx, "Release", "the permits expired or were removed before Release")
}

// ReleaseN gives back n of the permits (between 1 and N) and keeps the rest
// under the same lease: the same owner, token, renewal and Done. Waiters the
// released permits make room for are served at once, in arrival order, as
// after Release; afterwards N reports the permits still held. ReleaseN(N())
// is Release. Like Release, it runs detached from ctx's cancellation
// (bounded by WithReleaseTimeout).
//
// It returns ErrInvalidArgument for n out of range (nothing is sent), and
// ErrNotHeld, as Release does, when the permits had expired or were removed
// (they are then lost: Done closes and Err matches ErrLockLost) or were
// already released. Permits already lost here (Done closed) are ErrNotHeld
// without anything sent: they can no longer be kept, and Release gives back
// whatever Redis still holds of them. It also returns ErrKeyConflict, or the
// failure to reach Redis; the permits may then have been given back or not:
// N still reports the count before the call, the rest are held either way,
// and calling ReleaseN again with the same n never gives back more than n (a
// call sent again after a lost reply gives back nothing more either). Calls
// to ReleaseN of one Permits run one at a time; it is safe for concurrent
// use.
func (p *Permits) ReleaseN(ctx context.Context, n int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, held := p.l, int(p.n.Load())
	if n < 1 || n > held {
		return errs.Errorf("dlock: ReleaseN %q: %w", l.Name(), errs.InvalidArgf("%d permits: want between 1 and the %d held", n, held))
	}
	if n == held {
		return l.end(ctx, "ReleaseN", "the permits expired or were removed before ReleaseN")
	}
	if err := l.s.Usable(); err != nil {
		if err == errReleased {
			err = errPermitsReleased
		}
		return errs.Errorf("dlock: ReleaseN %q: %w", l.Name(), err)
	}
	rctx, cancel := detach(ctx, l.cfg.releaseTimeout)
	defer cancel()
	kept, err := p.a.releaseSome(rctx, l.s.Owner(), held-n)
	switch {
	case err == nil:
		p.n.Store(kept)
		return nil
	case errors.Is(err, ErrNotHeld):
		if !l.s.LoseIfHeld("ReleaseN found the permits gone or held by another owner") {
			// A Release gave them all back meanwhile: not a loss.
			return errs.Errorf("dlock: ReleaseN %q: %w", l.Name(), errPermitsReleased)
		}
		return errs.Errorf("dlock: ReleaseN %q: %w: the permits expired or were removed before ReleaseN", l.Name(), ErrNotHeld)
	}
	return errs.Redis("ReleaseN", l.Name(), err)
}

// Extend sets the permits' remaining time to ttl (between MinTTL and
// MaxTTL) and makes ttl their TTL for later renewals. It returns ErrNotHeld
// if the permits are no longer held (they are then lost); it never revives
// expired permits.
func (p *Permits) Extend(ctx context.Context, ttl time.Duration) error { return p.l.Extend(ctx, ttl) }

// TTL returns the permits' remaining time as the Redis server sees it. It
// returns ErrNotHeld if they are no longer held (they are then lost).
func (p *Permits) TTL(ctx context.Context) (time.Duration, error) { return p.l.TTL(ctx) }
