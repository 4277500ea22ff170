package dlock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// One contender per process and name.
//
// Goroutines of one Client that wait for the same Mutex queue here, in
// arrival order, and a single contender keeps one place in the lock's queue
// in Redis on their behalf: it waits (waitFor), and each time the lock is
// handed to it, gives the lease to the first local waiter still waiting,
// then queues again at the back for the rest. Waiting costs Redis the same
// whether one goroutine waits or a thousand; processes take turns; within a
// process, goroutines are served in order. FairMutex does not merge: each of
// its waiters keeps its own place, for strict arrival order across
// goroutines.

// localQueueKey identifies the waiters that can share a contender: the same
// lock, with the settings that shape its queue entry.
type localQueueKey struct {
	lock        string
	ttl         time.Duration
	maxHold     time.Duration
	waiterLease time.Duration
	replicaAck  int // the contender's attempts wait for as many replicas
}

// localQueue is one Client's waiters for one lock.
type localQueue struct {
	key      localQueueKey
	m        *Mutex // the descriptor the contender attempts with
	waiters  []*localWaiter
	cancel   context.CancelFunc // stops the contender's current wait
	lastErr  error              // the failure the contender keeps meeting, if any
	attempts int64              // made by the contender, for waiters' Observers
}

// localWaiter is one Lock call waiting in a localQueue.
type localWaiter struct {
	m      *Mutex // its own descriptor: its lease gets its options
	ready  chan localResult
	done   bool  // given a result, or gave up
	joined int64 // the queue's attempts when it joined, for its Observer
}

type localResult struct {
	lease *Lease
	err   error
}

// localQueues is a Client's local queues and their contenders.
type localQueues struct {
	mu         sync.Mutex
	queues     map[localQueueKey]*localQueue
	closing    bool // Close has begun: no new contenders
	contenders sync.WaitGroup
}

// close stops new contenders and waits for the running ones, which end
// their waits with ErrClosed.
func (lq *localQueues) close() {
	lq.mu.Lock()
	lq.closing = true
	lq.mu.Unlock()
	lq.contenders.Wait()
}

// lockShared is Mutex.Lock: take the lock at once if nobody of this Client
// waits for it, else wait in the local queue.
func (c *Client) lockShared(ctx context.Context, m *Mutex) (*Lease, error) {
	key := localQueueKey{lock: m.keys.lock, ttl: m.cfg.ttl, maxHold: m.cfg.maxHold, waiterLease: m.cfg.waiterLease, replicaAck: m.cfg.replicaAck}
	began := time.Now()

	c.local.mu.Lock()
	q := c.local.queues[key]
	if q != nil {
		w := newLocalWaiter(m)
		w.joined = q.attempts
		q.waiters = append(q.waiters, w)
		c.local.mu.Unlock()
		return c.awaitLocal(ctx, q, w, began)
	}
	c.local.mu.Unlock()

	// Nobody of ours waits: one attempt, which queues in Redis if taken.
	owner, err := newOwner(m.cfg.ownerInfo)
	if err != nil {
		return nil, err
	}
	channel := m.channel()
	first := firstAttempt{start: time.Now(), confirmed: c.notify.expect(channel, owner)}
	countAttempt(ctx, &m.cfg)
	first.result, first.err = m.attempt(ctx, owner, true)
	if first.err == nil && first.result.granted {
		if first.confirmed {
			c.notify.forget(channel, owner)
		}
		l, err := c.leaseFor(ctx, m, &m.cfg, owner, first.result, first.start)
		if !errors.Is(err, errGrantExpired) {
			return l, err
		}
		first.result.granted = false // wait again, as a contender
	}
	if first.confirmed && first.err != nil {
		c.notify.forget(channel, owner)
	}
	switch {
	case first.err == nil:
	case ctx.Err() != nil:
		c.abandon(ctx, m, &m.cfg, owner, nil)
		var last error
		if !errors.Is(first.err, context.Canceled) && !errors.Is(first.err, context.DeadlineExceeded) {
			last = first.err
		}
		return nil, waitEnded(ctx, m.name, began, 0, last)
	case !isTransient(first.err):
		c.abandon(ctx, m, &m.cfg, owner, first.err)
		return nil, redisError("Lock", m.name, first.err)
	}

	w := newLocalWaiter(m)
	c.local.mu.Lock()
	if q = c.local.queues[key]; q != nil {
		// Another goroutine became the contender meanwhile: join it, and
		// give up this second place in Redis.
		w.joined = q.attempts
		q.waiters = append(q.waiters, w)
		c.local.mu.Unlock()
		c.notify.forget(channel, owner)
		c.abandon(ctx, m, &m.cfg, owner, nil)
		return c.awaitLocal(ctx, q, w, began)
	}
	if c.local.closing {
		c.local.mu.Unlock()
		c.notify.forget(channel, owner)
		c.abandon(ctx, m, &m.cfg, owner, nil)
		return nil, errors.Join(ErrClosed, waitEnded(ctx, m.name, began, 0, nil))
	}
	if c.local.queues == nil {
		c.local.queues = make(map[localQueueKey]*localQueue)
	}
	q = &localQueue{key: key, m: m, waiters: []*localWaiter{w}}
	c.local.queues[key] = q
	c.local.contenders.Add(1)
	c.local.mu.Unlock()
	go c.contend(q, owner, &first)
	return c.awaitLocal(ctx, q, w, began)
}

func newLocalWaiter(m *Mutex) *localWaiter {
	return &localWaiter{m: m, ready: make(chan localResult, 1)}
}

// awaitLocal waits for the contender to hand w a lease, or for ctx.
func (c *Client) awaitLocal(ctx context.Context, q *localQueue, w *localWaiter, began time.Time) (*Lease, error) {
	select {
	case r := <-w.ready:
		if w.m.cfg.observer != nil {
			c.local.mu.Lock()
			n := q.attempts - w.joined
			c.local.mu.Unlock()
			addAttempts(ctx, &w.m.cfg, n)
		}
		return r.lease, r.err
	case <-ctx.Done():
	}
	c.local.mu.Lock()
	if !w.done {
		w.done = true
		q.remove(w)
		if len(q.waiters) == 0 && q.cancel != nil {
			q.cancel() // nobody left here: the contender leaves the queue in Redis
		}
		last := q.lastErr
		c.local.mu.Unlock()
		return nil, waitEnded(ctx, w.m.name, began, 0, last)
	}
	c.local.mu.Unlock()
	// The lease came as ctx ended: a cancelled Lock keeps nothing.
	if r := <-w.ready; r.lease != nil {
		_ = r.lease.Unlock(ctx)
	}
	return nil, waitEnded(ctx, w.m.name, began, 0, nil)
}

func (q *localQueue) remove(w *localWaiter) {
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			return
		}
	}
}

// contend is a local queue's contender: it waits in Redis for the lock under
// owner and hands each grant to the first local waiter, until none is left.
func (c *Client) contend(q *localQueue, owner string, first *firstAttempt) {
	defer c.local.contenders.Done()
	m := q.m
	for {
		ctx, cancel := context.WithCancel(context.Background())
		c.local.mu.Lock()
		q.cancel = cancel
		empty := len(q.waiters) == 0
		c.local.mu.Unlock()
		if empty {
			cancel()
		}
		r, from, err := c.waitFor(ctx, &m.cfg, waitSpec{
			name:    m.name,
			channel: m.channel(),
			owner:   owner,
			first:   first,
			noteErr: func(err error) {
				c.local.mu.Lock()
				q.lastErr = err
				c.local.mu.Unlock()
			},
			attempt: func(ctx context.Context) (attemptResult, error) {
				c.local.mu.Lock()
				q.attempts++
				c.local.mu.Unlock()
				return m.attempt(ctx, owner, true)
			},
			abandon: func(cause error) { c.abandon(ctx, m, &m.cfg, owner, cause) },
		})
		first = nil
		emptied := ctx.Err() != nil // the last local waiter left
		cancel()

		if err == nil {
			err = c.handOut(q, owner, r, from)
			if errors.Is(err, errGrantExpired) {
				err = nil // this process was too slow to claim it: queue again
			}
		}
		c.local.mu.Lock()
		if err != nil && !emptied {
			// A permanent failure, or Close: every waiter gets it.
			for _, w := range q.waiters {
				w.done = true
				w.ready <- localResult{err: err}
			}
			q.waiters = nil
		}
		if len(q.waiters) == 0 {
			delete(c.local.queues, q.key)
			c.local.mu.Unlock()
			return
		}
		c.local.mu.Unlock()
		if owner, err = newOwner(m.cfg.ownerInfo); err != nil {
			c.local.mu.Lock()
			for _, w := range q.waiters {
				w.done = true
				w.ready <- localResult{err: err}
			}
			q.waiters = nil
			delete(c.local.queues, q.key)
			c.local.mu.Unlock()
			return
		}
	}
}

// handOut gives a grant to the first local waiter still waiting; with none
// left, it releases the lock to the next owner in Redis.
func (c *Client) handOut(q *localQueue, owner string, r attemptResult, from time.Time) error {
	c.local.mu.Lock()
	var w *localWaiter
	for len(q.waiters) > 0 && w == nil {
		w, q.waiters = q.waiters[0], q.waiters[1:]
		if w.done {
			w = nil
		}
	}
	if w == nil {
		c.local.mu.Unlock()
		c.abandon(context.Background(), q.m, &q.m.cfg, owner, nil)
		return nil
	}
	w.done = true
	c.local.mu.Unlock()

	lease, err := c.leaseFor(context.Background(), w.m, &w.m.cfg, owner, r, from)
	if errors.Is(err, errGrantExpired) {
		c.local.mu.Lock()
		w.done = false
		q.waiters = append([]*localWaiter{w}, q.waiters...)
		c.local.mu.Unlock()
		return err
	}
	w.ready <- localResult{lease: lease, err: err}
	return nil
}
