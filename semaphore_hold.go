package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/internal/wait"
)

// semAcquisition is one acquisition of n permits: the queuedLock and
// holder behind its Lease, so waiting and renewal are the shared ones and n
// travels with the lease.
type semAcquisition struct {
	s *Semaphore
	n int
}

var (
	_ queuedLock   = (*semAcquisition)(nil)
	_ batchRenewer = (*semAcquisition)(nil)
)

func (a *semAcquisition) verbs() (try, wait string) { return "TryAcquire", "Acquire" }

func (a *semAcquisition) lockName() string { return a.s.name }

func (a *semAcquisition) kind() Kind { return KindSemaphore }

func (a *semAcquisition) channel() string { return a.s.keys.channel() }

func (a *semAcquisition) place(owner string) wait.Place {
	return wait.Place{Queue: a.s.keys.queue, Waiters: a.s.keys.waiters, Member: owner}
}

func (a *semAcquisition) attempt(ctx context.Context, owner string, queue bool) (wait.Result, error) {
	s := a.s
	c := newScriptCall(scripts.SemAcquire, s.keys.all, owner)
	c.setArgs(&c.member, a.n, s.permits, &s.ms.limitRetention,
		&s.ms.ttl, boolFlag(queue), &s.ms.waiterLease,
		&s.ms.claimWindow, &s.ms.fenceRetention,
		publishArg(s.c.drv), &s.keys.holders) // the channel (semKeys.channel)
	call := &c.call
	s.cfg.askAck(call)
	c.run(ctx, s.c.drv)
	r, err := a.attemptResult(call)
	if err != nil {
		return r, err
	}
	return grantAcked(ctx, a, &s.cfg, owner, call, r)
}

// wait.Result reads sem_acquire's reply.
func (a *semAcquisition) attemptResult(call *driver.Call) (wait.Result, error) {
	if call.Err != nil {
		if limit, ok := replyErrorNumber(call.Err, "DLOCK_LIMIT "); ok {
			var rerr *driver.ReplyError
			errors.As(call.Err, &rerr)
			return wait.Result{}, &semLimitError{n: a.n, limit: limit, reply: rerr}
		}
		return wait.Result{}, call.Err
	}
	if fence, ok := call.Reply.(int64); ok { // the free semaphore: the fast path's bare fence
		if fence <= 0 {
			return wait.Result{}, errs.Unexpected(call.Reply)
		}
		return wait.Result{Granted: true, Fence: fence, PTTL: ms(a.s.ms.ttl)}, nil
	}
	v, err := replyInts(call.Reply, 3)
	if err != nil {
		return wait.Result{}, err
	}
	if v[0] == 1 {
		return wait.Result{Granted: true, Fence: v[1], PTTL: ms(v[2])}, nil
	}
	r := wait.Result{PTTL: ms(v[1]), LastFence: lastFenceAt(call.Reply, 4)}
	if items, _ := call.Reply.([]any); len(items) > 3 {
		free, _ := items[3].(int64)
		if free >= int64(a.n) {
			r.QueuedAhead = "enough is free, but " + errs.OthersFirst
		}
	}
	return r, nil
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
	c := a.releaseCall(owner, 0)
	c.run(ctx, a.s.c.drv)
	_, err := a.releaseResult(&c.call)
	return err
}

// releaseSome gives back all of owner's permits but keep (Permits.ReleaseN)
// and returns how many it holds now, as release does.
func (a *semAcquisition) releaseSome(ctx context.Context, owner string, keep int) (int64, error) {
	c := a.releaseCall(owner, keep)
	c.run(ctx, a.s.c.drv)
	return a.releaseResult(&c.call)
}

// releaseCall is sem_release's call for owner, keeping keep permits (0:
// none).
func (a *semAcquisition) releaseCall(owner string, keep int) *scriptCall {
	s := a.s
	c := newScriptCall(scripts.SemRelease, s.keys.all, owner)
	c.setArgs(&c.member, s.permits, &s.ms.limitRetention, &s.ms.fenceRetention,
		publishArg(s.c.drv), &s.keys.holders) // the channel (semKeys.channel)
	if keep > 0 {
		c.call.Args = append(c.call.Args, keep)
	}
	return c
}

// releaseResult reads sem_release's reply: a positive number when owner
// held permits (the permits it keeps, when it kept some), ErrNotHeld when
// it held none. Waiters of this Client that the release served are told
// directly, ahead of the pub/sub message.
func (a *semAcquisition) releaseResult(call *driver.Call) (int64, error) {
	if held, ok := call.Reply.(int64); ok && held == 1 && call.Err == nil {
		return 1, nil // the fast path: all given back, nobody waits
	}
	held, err := a.s.grantsResult(call)
	switch {
	case err != nil:
		return 0, err
	case held <= 0:
		return 0, notHeld(call)
	}
	return held, nil
}

func (a *semAcquisition) renewCalls(owner string, px time.Duration, shorten bool) []*driver.Call {
	s := a.s
	return []*driver.Call{{
		Script: scripts.SemExtend,
		Keys:   s.keys.all[:3],
		Args:   extendArgs(shorten, owner, px.Milliseconds(), &s.ms.limitRetention),
	}}
}

// renewResult reads sem_extend's replies, which are owned_extend's: 1
// renewed, 0 not held.
func (a *semAcquisition) renewResult(calls []*driver.Call) error { return ownedExtendResult(calls) }

func (a *semAcquisition) renew(ctx context.Context, owner string, px time.Duration, shorten bool) error {
	return renewVia(ctx, a.s.c.drv, a, owner, px, shorten)
}

func (a *semAcquisition) remaining(ctx context.Context, owner string) (time.Duration, error) {
	return remainingVia(ctx, a.s.c.drv, scripts.SemPTTL, a.s.keys.all[:2], owner, nil)
}
