package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/wait"
)

// A Semaphore's acquisitions of one Client that ask for every permit the
// Semaphore was given (Acquire(ctx, permits), one of one the common case)
// wait in the Client's local line, as a Mutex's waiters do (mutex_wait.go):
// each excludes every other holder, so the line serves them one at a time
// without holding back anyone who could hold beside them, and a Release
// may pass the permits straight to the next. Acquisitions of fewer permits
// keep a place each (wait.Places): several may be served at once.

var _ lineLock = (*semAcquisition)(nil)

// lines reports whether the acquisition waits in the local line.
func (a *semAcquisition) lines() bool { return a.n == a.s.permits && !a.s.cfg.wait.spin }

// acquireInLine is Acquire for an acquisition that lines: the wait of the
// Client's acquisitions of as many permits in their line.
func (s *Semaphore) acquireInLine(ctx context.Context, a *semAcquisition) (*Lease, error) {
	if s.cfg.observer != nil {
		return observeAcquire(ctx, &s.cfg, KindSemaphore, s.name, "Acquire", func(ctx context.Context) (*Lease, error) {
			return s.waitInLine(ctx, a)
		})
	}
	return s.waitInLine(ctx, a)
}

func (s *Semaphore) waitInLine(ctx context.Context, a *semAcquisition) (*Lease, error) {
	if err := s.c.checkOpen("Acquire", s.name); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, errs.WaitEnded(ctx, s.name, time.Now(), 0, nil)
	}
	return s.c.lockShared(ctx, a)
}

func (a *semAcquisition) lineKey() localQueueKey {
	cfg := &a.s.cfg
	return localQueueKey{lock: a.s.keys.holders, ttl: cfg.ttl, maxHold: cfg.maxHold, waiterLease: cfg.waiterLease, permits: a.n}
}

func (a *semAcquisition) lineCfg() *config { return &a.s.cfg }

func (a *semAcquisition) newPlace() (string, error) { return ownerid.New(a.s.cfg.ownerInfo) }

func (a *semAcquisition) sharesPlace() bool { return true }

func (a *semAcquisition) firstAttempt(ctx context.Context, owner string) (wait.Result, error) {
	return a.attempt(ctx, owner, true)
}

func (a *semAcquisition) held() bool { return false }

func (a *semAcquisition) sameOwner(lineLock) bool { return false }

// unlock is Release's: an acquisition that lines may pass its permits to
// the next acquisition in its line.
func (a *semAcquisition) unlock(ctx context.Context, owner string) error {
	if a.lines() {
		if done, err := a.s.c.handOff(ctx, a, owner); done {
			return err
		}
	}
	return a.release(ctx, owner)
}

// transfer passes the permits on only when the holder still holds all it
// acquired, exactly what the waiter asks for (its line's key says so).
func (a *semAcquisition) transfer(ctx context.Context, owner, next string, px time.Duration) (fence int64, moved, resent bool, err error) {
	s := a.s
	fence, moved, r, err := protocol.SemTransfer(ctx, s.c.drv, s.keys.holders, s.keys.counts, s.keys.fence,
		owner, next, a.n, px, fenceRetention(s.cfg.ttl))
	return fence, moved, r.Resent, err
}

func (a *semAcquisition) releaser() queuedLock { return a }
