package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/wait"
)

// semAcquisition is one acquisition of n permits: the queuedLock and
// holder behind its Lease, so waiting and renewal are the shared ones and n
// travels with the lease.
type semAcquisition struct {
	s *Semaphore
	n int
	// lease is the Lease of the acquisition's first grant (makeLease):
	// made with the acquisition, both cost one allocation. leased says it
	// was started: a grant that expired before its claim spent it, and a
	// later grant gets a Lease of its own.
	lease  Lease
	leased bool
}

var (
	_ queuedLock   = (*semAcquisition)(nil)
	_ batchRenewer = (*semAcquisition)(nil)
	_ recorder     = (*semAcquisition)(nil)
	_ leaseMaker   = (*semAcquisition)(nil)
)

// makeLease is newLease in the acquisition's own Lease, when unspent. Only
// the acquiring goroutine turns its grants into leases.
func (a *semAcquisition) makeLease(ctx context.Context, cfg *config, owner string, r wait.Result, from time.Time) (*Lease, error) {
	l := &a.lease
	if a.leased {
		l = new(Lease)
	}
	a.leased = true
	if err := l.start(ctx, a.s.c.wd, a, cfg, owner, r.Fence, from, r.PTTL); err != nil {
		return nil, err
	}
	return l, nil
}

func (a *semAcquisition) verbs() (try, wait string) { return "TryAcquire", "Acquire" }

func (a *semAcquisition) lockName() string { return a.s.name }

func (a *semAcquisition) kind() Kind { return KindSemaphore }

func (a *semAcquisition) channel() string { return a.s.keys.channel() }

func (a *semAcquisition) place(owner string) wait.Place {
	return wait.Place{Queue: a.s.keys.queue, Waiters: a.s.keys.waiters, Member: owner}
}

func (a *semAcquisition) attempt(ctx context.Context, owner string, queue bool) (wait.Result, error) {
	s := a.s
	r, err := protocol.SemAcquire(ctx, s.c.drv, s.keys.all[:], owner, a.n, s.permits, queue, &s.ms.TTL, &s.settings, s.cfg.ack())
	if err != nil {
		var lerr *protocol.LimitError
		if errors.As(err, &lerr) {
			return wait.Result{}, &semLimitError{n: a.n, limit: lerr.Limit, reply: lerr.Reply}
		}
		return wait.Result{}, err
	}
	res, err := grantAcked(ctx, a, &s.cfg, owner, r)
	if !r.Granted && r.Free >= int64(a.n) {
		res.QueuedAhead = "enough is free, but " + errs.OthersFirst
	}
	return res, err
}

// semLimitError is the server's refusal of a request for more permits than
// the limit. It matches ErrInvalidArgument; it also unwraps to the error
// reply, which tells the waiting loop that retrying is pointless and that
// nothing is left to clean up.
type semLimitError struct {
	n     int
	limit int64 // -1: unknown
	reply *driver.ReplyError
}

func (e *semLimitError) Error() string {
	if e.limit < 0 {
		return fmt.Sprintf("%v: %d permits asked for, more than the semaphore's limit: this can never succeed", ErrInvalidArgument, e.n)
	}
	return fmt.Sprintf("%v: %d permits asked for, but the semaphore's limit is %d: this can never succeed (ask for fewer, or raise the limit with SetPermits or AddPermits)",
		ErrInvalidArgument, e.n, e.limit)
}

func (e *semLimitError) Unwrap() []error { return []error{ErrInvalidArgument, e.reply} }

// release gives the permits back (Permits.Release), and is how an abandoned
// waiter leaves the queue. Waiters of this Client that the release serves
// are told directly, ahead of the pub/sub message.
func (a *semAcquisition) release(ctx context.Context, owner string) error {
	_, err := a.releaseSome(ctx, owner, 0)
	return err
}

// releaseSome gives back all of owner's permits but keep (Permits.ReleaseN)
// and returns how many it holds now, as release does: a positive number
// (the permits it keeps, when it kept some).
func (a *semAcquisition) releaseSome(ctx context.Context, owner string, keep int) (int64, error) {
	s := a.s
	r, err := protocol.SemRelease(ctx, s.c.drv, s.keys.all[:], owner, &s.settings, keep, s.deliver)
	if err != nil {
		return 0, releaseErr(r, err)
	}
	return r.Held, nil
}

func (a *semAcquisition) RenewCalls(owner string, px time.Duration, shorten bool) []*driver.Call {
	s := a.s
	return protocol.SemExtend(s.keys.all[:3], owner, px, &s.ms.LimitRetention, shorten).Batch()
}

// RenewResult reads sem_extend's replies, which are owned_extend's: 1
// renewed, 0 not held.
func (a *semAcquisition) RenewResult(calls []*driver.Call) error { return protocol.ExtendResult(calls) }

func (a *semAcquisition) RecordCalls(owner string, age, retention time.Duration) []*driver.Call {
	return []*driver.Call{protocol.HeldRecord(a.s.keys.held, owner, age, retention)}
}

func (a *semAcquisition) Renew(ctx context.Context, owner string, px time.Duration, shorten bool) error {
	return renewVia(ctx, a.s.c.drv, a, owner, px, shorten)
}

func (a *semAcquisition) Remaining(ctx context.Context, owner string) (time.Duration, error) {
	return protocol.SemPTTL(ctx, a.s.c.drv, a.s.keys.all[:2], owner)
}
