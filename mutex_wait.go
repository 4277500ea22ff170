package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/wait"
)

// A Mutex's waiters of one Client share one place in the lock's queue:
// they wait in the Client's local line (wait.Line), whose head waits in
// Redis (wait.Engine) under one owner value on behalf of them all, and an
// Unlock may hand the lock straight to the next of them. The rules, and
// why, are in docs/waiting.md, "One place in the queue per process and
// name" and "Local hand-off, bounded". FairMutex does not share: each of
// its waiters keeps its own place, for strict arrival order.

// localQueueKey identifies the waiters that can share a place: the same
// lock, with the settings that shape its queue entry.
type localQueueKey struct {
	lock        string
	ttl         time.Duration
	maxHold     time.Duration
	waiterLease time.Duration
}

// localGrant is a lock handed over by a local Unlock.
type localGrant struct {
	fence int64
	px    time.Duration // the key's expiry as set
	from  time.Time     // before the script was sent: the validity's start
	at    time.Time     // when its reply came: the hand-off's start
}

type (
	mutexLine   = wait.Line[localQueueKey, *Mutex, localGrant]
	mutexQueue  = wait.Queue[localQueueKey, *Mutex, localGrant]
	mutexWaiter = wait.Waiter[*Mutex, localGrant]
	mutexTurn   = wait.Turn[localGrant]
)

// lockShared is Mutex.Lock: take the lock at once if nobody of this Client
// waits for it, else wait in the local line.
func (c *Client) lockShared(ctx context.Context, m *Mutex) (*Lease, error) {
	key := m.localKey()
	began := time.Now()
	if q, w := c.local.Join(key, m); q != nil {
		return c.awaitTurn(ctx, q, w, began)
	}

	// Nobody of ours waits: one attempt, which queues in Redis if taken.
	owner, err := ownerid.New(m.cfg.ownerInfo)
	if err != nil {
		return nil, err
	}
	channel := m.channel()
	first := wait.First{Start: time.Now(), Confirmed: c.notify.Expect(channel, owner)}
	countAttempt(ctx, &m.cfg)
	first.Result, first.Err = m.acquire(ctx, owner, flagNewOwner) // owner is new: never queued
	if first.Err == nil && first.Result.Granted {
		if first.Confirmed {
			c.notify.Forget(channel, owner)
		}
		l, err := c.leaseFor(ctx, m, &m.cfg, owner, first.Result, first.Start)
		if !errors.Is(err, errGrantExpired) {
			return l, err
		}
		first.Result.Granted = false // wait again, as the head
	}
	if first.Confirmed && first.Err != nil {
		c.notify.Forget(channel, owner)
	}
	switch {
	case first.Err == nil:
	case ctx.Err() != nil:
		c.abandon(ctx, m, &m.cfg, owner, first.Err, nil)
		last := errs.ErrNoAnswer
		if !errors.Is(first.Err, context.Canceled) && !errors.Is(first.Err, context.DeadlineExceeded) {
			last = first.Err
		}
		return nil, errs.WaitEnded(ctx, m.name, began, 0, last)
	case !errs.IsTransient(first.Err):
		c.abandon(ctx, m, &m.cfg, owner, first.Err, nil)
		return nil, errs.Redis("Lock", m.name, first.Err)
	}

	q, w, joined, closed := c.local.Start(key, m)
	switch {
	case joined:
		// Another goroutine became the head meanwhile: join it, and give
		// up this second place in Redis.
		c.notify.Forget(channel, owner)
		c.abandon(ctx, m, &m.cfg, owner, nil, nil)
		return c.awaitTurn(ctx, q, w, began)
	case closed:
		c.notify.Forget(channel, owner)
		c.abandon(ctx, m, &m.cfg, owner, nil, nil)
		return nil, errors.Join(ErrClosed, errs.WaitEnded(ctx, m.name, began, 0, nil))
	}
	waiting := first // copied, so the uncontended path keeps first on the stack
	return c.contend(ctx, q, w, owner, nil, &waiting, began)
}

// localKey is the local queue m's waiters share.
func (m *Mutex) localKey() localQueueKey {
	return localQueueKey{lock: m.keys.lock, ttl: m.cfg.ttl, maxHold: m.cfg.maxHold, waiterLease: m.cfg.waiterLease}
}

// awaitTurn waits behind the head until it is this waiter's turn to
// contend, or the lock is handed to it, or ctx ends.
func (c *Client) awaitTurn(ctx context.Context, q *mutexQueue, w *mutexWaiter, began time.Time) (*Lease, error) {
	t, how, last := c.local.Await(ctx, q, w, 0, c.closed, nil)
	switch how {
	case wait.Woken:
		return c.takeTurn(ctx, q, w, t, began)
	case wait.Head:
		// No hand-off came (or the Client closed): contend as the head,
		// which ends every wait of the queue if the Client is closed.
		return c.contend(ctx, q, w, "", nil, nil, began)
	case wait.PassOn:
		if t.Err == nil {
			c.leave(ctx, q, w, t.Owner, t.State)
		}
		last = nil
	case wait.Outcome:
		// A lock handed over is released again, so that a cancelled Lock
		// leaves nothing behind.
		t := <-w.Outcome()
		if t.Grant != nil {
			rctx, cancel := detach(ctx, w.D.cfg.releaseTimeout)
			_ = w.D.unlock(rctx, t.Owner)
			cancel()
		}
		last = t.Err
	}
	return nil, errs.WaitEnded(ctx, w.D.name, began, 0, last)
}

// takeTurn acts on what a waiter behind the head was told.
func (c *Client) takeTurn(ctx context.Context, q *mutexQueue, w *mutexWaiter, t mutexTurn, began time.Time) (*Lease, error) {
	m := w.D
	switch {
	case t.Err != nil:
		return nil, t.Err
	case t.Restart:
		return c.lockShared(ctx, m)
	case t.Grant != nil:
		g := t.Grant
		r := wait.Result{Granted: true, Fence: g.fence, PTTL: g.px, GrantedAtUs: g.at.UnixMicro()}
		l, err := c.leaseFor(ctx, m, &m.cfg, t.Owner, r, g.from)
		if err != nil {
			c.local.EndTurn(q.Key(), q) // nobody of this Client holds the lock now
		}
		if errors.Is(err, errGrantExpired) {
			if ctx.Err() != nil {
				return nil, errs.WaitEnded(ctx, m.name, began, 0, nil)
			}
			return c.lockShared(ctx, m) // too slow to take it: start over
		}
		return l, err
	}
	return c.contend(ctx, q, w, t.Owner, t.State, nil, began)
}

// leave is a head giving up: the next local waiter takes over its place
// (owner, with st, what the waits for it learnt), or, with none, the place
// is given up in Redis.
func (c *Client) leave(ctx context.Context, q *mutexQueue, head *mutexWaiter, owner string, st *wait.Owner) {
	if nobody, _ := c.local.Leave(q, head, owner, st); nobody {
		c.abandon(ctx, head.D, &head.D.cfg, owner, nil, st)
	}
}

// contend is the head's wait in Redis under owner (a fresh one when empty;
// st is what the waits for owner learnt before, when a head passed its
// place on; first is the attempt that queued it, if just made). The head
// takes the lease it is granted and promotes the next waiter.
func (c *Client) contend(ctx context.Context, q *mutexQueue, w *mutexWaiter, owner string, st *wait.Owner, first *wait.First, began time.Time) (*Lease, error) {
	m := w.D
	for {
		if owner == "" {
			var err error
			if owner, err = ownerid.New(m.cfg.ownerInfo); err != nil {
				c.local.EndQueue(q, err)
				return nil, err
			}
			st = nil
		}
		if st == nil {
			st = &wait.Owner{}
		}
		r, from, err := c.waits.Wait(ctx, m.cfg.waitSettings(), wait.Spec{
			Name:    m.name,
			Channel: m.channel(),
			Owner:   owner,
			State:   st,
			First:   first,
			NoteErr: func(err error) { c.local.NoteErr(q, err) },
			Attempt: func(ctx context.Context) (wait.Result, error) { return m.attempt(ctx, owner, true) },
			// No abandon: a head that gives up passes its place on, with
			// st (leave), and it is cleaned up only when nobody takes it.
		})
		first = nil
		switch {
		case err == nil:
			l, err := c.leaseFor(ctx, m, &m.cfg, owner, r, from)
			if errors.Is(err, errGrantExpired) {
				if ctx.Err() != nil {
					// Nothing is held and the place is spent: the next
					// local waiter queues afresh.
					c.local.Promote(q, w, false)
					return nil, errs.WaitEnded(ctx, m.name, began, 0, nil)
				}
				if len(st.Pending) > 0 {
					// An attempt for it may still land and queue it.
					c.abandon(ctx, m, &m.cfg, owner, nil, st)
				}
				owner = "" // too slow to claim it: queue again under a fresh owner
				continue
			}
			c.local.Promote(q, w, err == nil)
			return l, err
		case ctx.Err() != nil:
			c.leave(ctx, q, w, owner, st)
			return nil, err
		default:
			// Close, or a failure that retrying cannot fix: every wait ends.
			c.abandon(ctx, m, &m.cfg, owner, err, st)
			c.local.EndQueue(q, err)
			return nil, err
		}
	}
}
