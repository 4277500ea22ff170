package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/wait"
)

// redlockRun is the state of one RedlockMutex.Lock as the head of its line.
type redlockRun struct {
	m     *RedlockMutex
	ctx   context.Context
	w     *redlockWaiter
	ear   *redlockEar
	began time.Time
	owner string
	wait  redlockWait

	holderTTL time.Duration
	last      error
	timer     *time.Timer // made when the Lock first waits
	// next: the last attempt's nodes said this line has waited longest;
	// heard: the last sleep ended with a release heard.
	next, heard bool
}

func (w *redlockRun) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// ended is the error of a Lock that its context ended; closed adds
// ErrClosed for a Redlock closed meanwhile.
func (w *redlockRun) ended(closed bool) error {
	err := errs.WaitEnded(w.ctx, w.m.name, w.began, w.holderTTL, w.last)
	if closed {
		return errors.Join(ErrClosed, err)
	}
	return err
}

// awaitHandoff waits while an Unlock of this Redlock hands the lock over:
// its outcome comes within a node timeout (after the old lease's
// stragglers). A ctx that ends first ends the Lock: leave releases the
// outcome in the background. done is false when the hand-off failed.
func (w *redlockRun) awaitHandoff() (*Lease, bool, error) {
	select {
	case t := <-w.w.Outcome():
		return w.takeHandoff(t)
	case <-w.ctx.Done():
		return nil, true, w.ended(false)
	case <-w.m.r.closed:
		return nil, true, w.ended(true)
	}
}

// redlockStep is what one step of a Lock decided: how long to wait before
// asking again (again: ask at once), whether a release may wake the wait
// sooner, or the end of the Lock (done, with its lease or error).
type redlockStep struct {
	delay       time.Duration
	wake, again bool
	done        bool
	lease       *Lease
	err         error
}

// step asks the nodes, unless an Unlock of this process is releasing
// the lock (releasing) and the release can be heard.
func (w *redlockRun) step(releasing bool) redlockStep {
	m, wait := w.m, &w.wait
	heard := wait.l != nil && wait.l.hears()
	if releasing && heard {
		return redlockStep{delay: wait.idle(0), wake: true}
	}
	if wait.l != nil {
		wait.l.drain()
	}
	res := m.attempt(w.ctx, "Lock", w.owner, w.ear)
	w.next = res.next
	switch {
	case res.hold != nil:
		l, err := m.lease(w.ctx, w.owner, res)
		return redlockStep{done: true, lease: l, err: err}
	case res.err == nil: // ctx ended
		return redlockStep{done: true, err: w.ended(false)}
	case res.permanent:
		return redlockStep{done: true, err: res.err}
	}
	if res.spent {
		// A give-back of that attempt may still be on its way to a node:
		// as the same owner, the next attempt's share there could be
		// deleted after its grant (see attempt).
		owner, err := ownerid.New(m.cfg.ownerInfo)
		if err != nil {
			return redlockStep{done: true, err: err}
		}
		w.owner = owner
	}
	w.holderTTL, w.last = res.holderTTL, res.err
	var nerr *errs.NotObtainedError
	if errors.As(res.err, &nerr) {
		w.last = nerr.Last // contention is what the wait is about: keep only node failures
	}
	if wait.l == nil {
		// No subscription could have heard a release during the attempt,
		// so heard is false and the wait subscribes now and asks again.
		wait.l = m.r.listener(w.ear, true)
	}
	delay, wake := wait.next(w.ctx, res, heard)
	return redlockStep{delay: delay, wake: wake, again: delay == 0}
}

// sleep waits up to delay for a release (when wake) or a hand-off; done
// ends the Lock.
func (w *redlockRun) sleep(delay time.Duration, wake bool) (*Lease, bool, error) {
	var signal <-chan struct{}
	if wake {
		signal = w.wait.l.signal
	}
	if w.timer == nil {
		w.timer = time.NewTimer(delay)
	} else {
		w.timer.Reset(delay)
	}
	defer wait.StopTimer(w.timer)
	w.heard = false
	select {
	case <-signal:
		w.heard = true
	case t := <-w.w.Outcome():
		return w.takeHandoff(t)
	case <-w.timer.C:
	case <-w.ctx.Done():
		return nil, true, w.ended(false)
	case <-w.m.r.closed:
		return nil, true, w.ended(true)
	}
	return nil, false, nil
}

// yield lets the line that has waited longest ask first after a release,
// and so keeps a process from losing race after race to the others: a
// line that the nodes did not name as that line at its last attempt waits
// a tenth of the minimum retry delay before it asks (an attempt's round
// trip on a LAN, many times over). A hand-off or the end of ctx still ends
// the wait; done ends the Lock.
func (w *redlockRun) yield() (*Lease, bool, error) {
	if !w.heard || w.next {
		return nil, false, nil
	}
	return w.sleep(w.m.cfg.retryMin/10, false)
}

// takeHandoff takes the outcome of a hand-off to the head: the lease
// (done) or, when it failed, nothing: the head asks again.
func (w *redlockRun) takeHandoff(t redlockTurn) (*Lease, bool, error) {
	w.m.r.line.Received(w.w)
	if t.Grant == nil {
		return nil, false, nil
	}
	lease, err := w.m.lease(w.ctx, t.Owner, *t.Grant)
	return lease, true, err
}
