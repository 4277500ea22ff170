package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/wait"
)

// takeSuccessor takes out of its local queue the waiter an Unlock of the
// lock keyed key may hand the lock to (see "Local hand-off"), or returns
// nil when the Unlock must go through the queue in Redis (always when
// local is false): then it ends this Client's turn. Only the first waiter
// of a turn can be handed the lock: while a goroutine of this Client waits
// in Redis (it queued before the Client held the lock, or it stood by
// longer than standbyGrace), the queue there serves it, and nobody behind
// it goes first.
func (lq *localQueues) takeSuccessor(key localQueueKey, local bool) *localWaiter {
	lq.mu.Lock()
	defer lq.mu.Unlock()
	q := lq.queues[key]
	if q == nil {
		return nil
	}
	if !local || lq.closing || q.contending || len(q.waiters) == 0 || q.streak >= maxLocalHandoffs || q.waiters[0].m.cfg.replicaAck > 0 {
		q.streak = 0 // this Unlock serves the queue in Redis
		lq.endTurnLocked(q)
		return nil
	}
	q.streak++
	w := q.waiters[0]
	q.waiters = append(q.waiters[:0], q.waiters[1:]...)
	q.standByLocked()
	return w
}

// endTurn ends this Client's turn on the lock keyed key after its local
// hand-offs stopped without an Unlock through Redis: a hand-off that
// failed, a lease that could not be taken. With q set, only if the queue
// is still q.
func (lq *localQueues) endTurn(key localQueueKey, q *localQueue) {
	lq.mu.Lock()
	defer lq.mu.Unlock()
	if cur := lq.queues[key]; cur != nil && (q == nil || cur == q) {
		lq.endTurnLocked(cur)
	}
}

// endTurnLocked makes the first local waiter the head again, to queue in
// Redis before the lock is released there; with no waiter left, the queue
// goes.
func (lq *localQueues) endTurnLocked(q *localQueue) {
	switch {
	case q.contending:
	case len(q.waiters) == 0:
		if lq.queues[q.key] == q {
			delete(lq.queues, q.key)
		}
	default:
		q.contending = true
		q.waiters[0].wake <- localTurn{} // it stood by: nothing else in its channel
	}
}

// standByLocked tells the first waiter, during this Client's turn, that it
// is first (awaitTurn's standbyGrace starts).
func (q *localQueue) standByLocked() {
	if !q.contending && len(q.waiters) > 0 {
		select {
		case q.waiters[0].first <- struct{}{}:
		default:
		}
	}
}

// promote ends the head's wait, and gives the queue its next head: with
// turn (the head holds the lock now), this Client's turn begins, and the
// local waiters stand by for its hand-offs (see "A process's turn");
// without, the next local waiter contends under a fresh owner, at the back
// of the lock's queue. With no waiter left, the queue goes.
func (c *Client) promote(q *localQueue, head *localWaiter, turn bool) {
	c.local.mu.Lock()
	defer c.local.mu.Unlock()
	q.remove(head)
	switch {
	case len(q.waiters) == 0:
		c.deleteQueueLocked(q)
	case turn:
		q.contending = false
		q.streak = 0
		q.standByLocked()
	default:
		q.waiters[0].wake <- localTurn{}
	}
}

// leave is a head giving up: the next local waiter takes over its place
// (owner, with st, what the waits for it learnt), or, with none, the place
// is given up in Redis.
func (c *Client) leave(ctx context.Context, q *localQueue, head *localWaiter, owner string, st *wait.Owner) {
	c.local.mu.Lock()
	q.remove(head)
	if len(q.waiters) > 0 {
		q.waiters[0].wake <- localTurn{owner: owner, state: st}
		c.local.mu.Unlock()
		return
	}
	c.deleteQueueLocked(q)
	c.local.mu.Unlock()
	c.abandon(ctx, head.m, &head.m.cfg, owner, nil, st)
}

// endQueue gives err to every waiter left behind the head and drops q.
func (c *Client) endQueue(q *localQueue, err error) {
	c.local.mu.Lock()
	defer c.local.mu.Unlock()
	for i, w := range q.waiters {
		if i > 0 { // the head (0) is the caller
			w.wake <- localTurn{err: err}
		}
	}
	q.waiters = nil
	c.deleteQueueLocked(q)
}

func (c *Client) deleteQueueLocked(q *localQueue) {
	if c.local.queues[q.key] == q {
		delete(c.local.queues, q.key)
	}
}

// contend is the head's wait in Redis under owner (a fresh one when empty;
// st is what the waits for owner learnt before, when a head passed its
// place on; first is the attempt that queued it, if just made). The head
// takes the lease it is granted and promotes the next waiter.
func (c *Client) contend(ctx context.Context, q *localQueue, w *localWaiter, owner string, st *wait.Owner, first *wait.First, began time.Time) (*Lease, error) {
	m := w.m
	for {
		if owner == "" {
			var err error
			if owner, err = ownerid.New(m.cfg.ownerInfo); err != nil {
				c.endQueue(q, err)
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
			NoteErr: func(err error) {
				c.local.mu.Lock()
				q.lastErr = err
				c.local.mu.Unlock()
			},
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
					c.promote(q, w, false)
					return nil, errs.WaitEnded(ctx, m.name, began, 0, nil)
				}
				if len(st.Pending) > 0 {
					// An attempt for it may still land and queue it.
					c.abandon(ctx, m, &m.cfg, owner, nil, st)
				}
				owner = "" // too slow to claim it: queue again under a fresh owner
				continue
			}
			c.promote(q, w, err == nil)
			return l, err
		case ctx.Err() != nil:
			c.leave(ctx, q, w, owner, st)
			return nil, err
		default:
			// Close, or a failure that retrying cannot fix: every wait ends.
			c.abandon(ctx, m, &m.cfg, owner, err, st)
			c.endQueue(q, err)
			return nil, err
		}
	}
}
