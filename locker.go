package dlock

import (
	"context"
	"errors"

	"github.com/dlock-go/dlock/internal/errs"
)

// Locker is what Mutex (a lock on one Redis deployment) and RedlockMutex (a
// lock over independent masters) have in common, so that code which takes
// locks can switch backends. Both return a *Lease with the same semantics,
// except that a RedlockMutex's leases carry no fencing token. The caller must
// Unlock every Lease it gets.
type Locker interface {
	// TryLock makes one attempt to take the lock; an error matching
	// ErrNotObtained means another owner holds it.
	TryLock(ctx context.Context) (*Lease, error)
	// Lock takes the lock, waiting as long as ctx allows.
	Lock(ctx context.Context) (*Lease, error)
	// Name returns the lock's name.
	Name() string
}

var _ Locker = (*Mutex)(nil) // and *RedlockMutex, asserted in redlock.go

// leaseKey is the context key under which do passes fn its lease.
type leaseKey struct{}

// LeaseFromContext returns the lease held while Client.Do or Redlock.Do
// runs fn, from the context fn is given: its Token fences fn's writes.
func LeaseFromContext(ctx context.Context) (*Lease, bool) {
	l, ok := ctx.Value(leaseKey{}).(*Lease)
	return l, ok
}

// boundWait returns ctx bounded by WithWaitTimeout, when set, for a call
// that waits (Lock, RLock, Acquire, Campaign): the bound is the wait's
// alone, and the caller's ctx goes on bounding what follows.
func (c *config) boundWait(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.waitTimeout > 0 {
		return context.WithTimeout(ctx, c.waitTimeout)
	}
	return ctx, func() {}
}

// do is Do for any Locker: it waits for the lock (Lock applies
// WithWaitTimeout), runs fn with a context
// that is cancelled (cause ErrLockLost) if the lock is lost, and always
// releases the lock, even when ctx is cancelled or fn panics. It returns
// fn's error, joined with the loss and a failed release. Client.Do and
// Redlock.Do call it.
func do(ctx context.Context, lk Locker, fn func(ctx context.Context) error) (err error) {
	lease, err := lk.Lock(ctx)
	if err != nil {
		return err
	}
	fnCtx, cancel := context.WithCancelCause(context.WithValue(ctx, leaseKey{}, lease))
	defer cancel(nil)
	lease.onLoss(cancel)

	defer func() {
		unlockErr := lease.Unlock(ctx)
		// Not a loss declared by the failed release itself (Lease.Unlock):
		// the lock was held while fn ran, and unlockErr says what failed.
		lost := lease.lostWhileHeld()
		if lost != nil && errors.Is(unlockErr, ErrNotHeld) {
			unlockErr = nil // the loss says it already
		}
		if lost != nil && errors.Is(err, ErrLockLost) {
			lost = nil // fn returned the loss itself
		}
		err = errs.Join(err, lost, unlockErr)
	}()
	return fn(fnCtx)
}
