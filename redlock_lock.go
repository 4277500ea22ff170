package dlock

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/wait"
)

func (m *RedlockMutex) lock(ctx context.Context) (*Lease, error) {
	if err := m.usable(); err != nil {
		return nil, err
	}
	began := time.Now()
	if ctx.Err() != nil {
		return nil, errs.WaitEnded(ctx, m.name, began, 0, nil)
	}
	ear := m.r.hear(m)
	defer m.r.unhear(ear)
	return m.queue(ctx, ear, began)
}

// queue waits in the Redlock's local line: as its head, or behind it.
func (m *RedlockMutex) queue(ctx context.Context, ear *redlockEar, began time.Time) (*Lease, error) {
	if q, w := m.r.line.Join(m.key, m); q != nil {
		return m.await(ctx, q, w, ear, began)
	}
	q, w, joined, closed := m.r.line.Start(m.key, m)
	switch {
	case closed:
		return nil, errors.Join(ErrClosed, errs.WaitEnded(ctx, m.name, began, 0, nil))
	case joined:
		return m.await(ctx, q, w, ear, began)
	}
	return m.contend(ctx, q, w, ear, began, false)
}

// await waits behind the head. A waiter standing by in this process's turn
// becomes the head when a release is heard, or after a third of the TTL:
// its own process holds the lock, and its Unlock hands it over or ends
// the turn.
func (m *RedlockMutex) await(ctx context.Context, q *redlockQueue, w *redlockWaiter, ear *redlockEar, began time.Time) (*Lease, error) {
	standby := wait.LookAgainIn(redlockPX(&m.cfg)/3, 0)
	t, how, last := m.r.line.Await(ctx, q, w, standby, m.r.closed, m.r.heard(ear))
	switch how {
	case wait.Woken:
		switch {
		case t.Err != nil:
			return nil, t.Err
		case t.Restart:
			return m.queue(ctx, ear, began) // the hand-off failed: start over
		case t.Grant != nil:
			l, err := m.lease(ctx, t.Owner, *t.Grant)
			if err != nil {
				m.r.line.EndTurn(q.Key(), q) // nobody of this Redlock holds the lock now
			}
			return l, err
		}
		return m.contend(ctx, q, w, ear, began, t.Held)
	case wait.Head:
		return m.contend(ctx, q, w, ear, began, false)
	case wait.PassOn:
		m.r.line.Leave(q, w, "", nil)
	case wait.Outcome:
		m.r.workers.Go(func() { m.releaseHandoff(ctx, w) })
	}
	return nil, errs.WaitEnded(ctx, m.name, began, 0, last)
}

// contend is the head's wait: it asks the nodes, waits for a release, and
// takes a hand-off from an Unlock of this Redlock, until it holds the lock
// or ctx ends. The next waiter then goes on (depart). held: an Unlock of
// this process is releasing the lock, so the first attempt waits for the
// release when it can hear it (the nodes would only say "held").
func (m *RedlockMutex) contend(ctx context.Context, q *redlockQueue, w *redlockWaiter, ear *redlockEar, began time.Time, held bool) (lease *Lease, err error) {
	defer func() { m.depart(ctx, q, w, ear, lease != nil) }()
	owner, err := ownerid.New(m.cfg.ownerInfo)
	if err != nil {
		return nil, err
	}
	// wait.l is nil until the head must wait (see Redlock.hear).
	run := &redlockRun{m: m, ctx: ctx, w: w, ear: ear, began: began, owner: owner,
		wait: redlockWait{m: m, l: m.r.listener(ear, false)}}
	defer run.stop()
	for first := true; ; first = false {
		if m.r.line.Taken(w) {
			if l, done, err := run.awaitHandoff(); done {
				return l, err
			}
			continue
		}
		select {
		case <-m.r.closed:
			return nil, run.ended(true)
		default:
		}
		st := run.step(first && held)
		switch {
		case st.done:
			return st.lease, st.err
		case st.again && ctx.Err() == nil:
			continue
		}
		if l, done, err := run.sleep(st.delay, st.wake); done {
			return l, err
		}
		if l, done, err := run.yield(); done {
			return l, err
		}
	}
}

// depart ends the head's wait, holding the lock or not: the next waiter
// stands by for a hand-off, or contends. A hand-off still on its way (its
// Unlock is bounded by the old lease's stragglers and the node timeout) is
// released again by one of the Redlock's workers (Close waits for it), so
// that a Lock that gave up, or took the lock by an attempt of its own,
// leaves nothing behind and returns without waiting for it.
func (m *RedlockMutex) depart(ctx context.Context, q *redlockQueue, w *redlockWaiter, ear *redlockEar, holding bool) {
	var taken bool
	if holding {
		// A release heard before the grant is stale: it must not wake the
		// next waiter, standing by, to ask the nodes for a lock its own
		// process holds.
		if l := m.r.listener(ear, false); l != nil {
			l.drain()
		}
		taken = m.r.line.Promote(q, w, true)
	} else {
		_, taken = m.r.line.Leave(q, w, "", nil)
	}
	if taken {
		m.r.workers.Go(func() { m.releaseHandoff(ctx, w) })
	}
}

// releaseHandoff waits for the outcome of a hand-off to w, which has left,
// and unlocks what it got: the next waiter of this process may be handed
// it, or the turn ends. Its wait ignores ctx: the Unlock that took w
// always sends an outcome. The owner value is fresh, and only this uses it.
func (m *RedlockMutex) releaseHandoff(ctx context.Context, w *redlockWaiter) {
	t := <-w.Outcome()
	m.r.line.Received(w)
	if t.Grant == nil {
		return
	}
	rctx, cancel := detach(ctx, m.cfg.releaseTimeout)
	defer cancel()
	if err := t.Grant.hold.unlock(rctx, t.Owner); err != nil {
		m.cfg.logger.Warn("dlock: could not release a Redlock lock handed over to a Lock that gave up; the lock's key expires by its TTL",
			slog.String("lock", m.name), slog.Any("error", err))
	}
}
