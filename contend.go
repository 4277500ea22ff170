package dlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/wait"
)

// One place in the lock's queue per process and name.
//
// Goroutines of one Client that wait for the same Mutex queue here, in
// arrival order, and only the first of them, the head, waits in Redis
// (wait.Engine.Wait), under one owner value that holds one place in the lock's queue
// on behalf of them all. When the lock is handed to that owner, the head
// takes the lease itself (no other goroutine in between, so a hand-off costs
// no extra wake-up) and this Client's turn begins (see "A process's turn"
// below): the local waiter first in line when it ends joins the lock's
// queue again, at the back, under a fresh owner. A head whose context ends
// passes its place, owner and all, to the next local waiter, so nobody
// behind it loses its turn. Waiting costs Redis the same whether one
// goroutine waits or a thousand; processes take turns; within a process
// goroutines are served in arrival order.
// FairMutex does not share: each of its waiters keeps its own place, for
// strict arrival order across goroutines.
//
// Local hand-off. An Unlock in its Client's turn (below), with goroutines
// of its Client waiting for the lock, passes it straight to the first of
// them: one script moves the key to a fresh owner and issues the next
// fencing token, and the releasing goroutine hands the lease over itself.
// No queue in Redis, no publish, no second goroutine joining the queue:
// under contention a hand-off then costs one script that touches two
// keys, where a hand-off through the queue costs two larger scripts, a
// message parsed by every subscribed process, and a wake-up through the
// subscription. Other processes keep their turn by a bound: after
// maxLocalHandoffs local hand-offs in a row, the next Unlock goes through
// the queue in Redis, whose head (another process's, or this one's own) is
// served next: the queue is served at least every maxLocalHandoffs+1
// grants, as cohort locks bound their turns between the cores of one NUMA
// node. FairMutex never does this: its order is strict.
//
// A process's turn. While a goroutine of this Client holds the lock that
// its head was granted through Redis, nobody of this Client contends in
// Redis (localQueue.contending is false): every local waiter, the first
// included, is served by the turn's local hand-offs, in arrival order. The
// Unlock that ends the turn first makes the first local waiter the head
// again, which queues at the back of the lock's queue in Redis, then
// releases through that queue, so it waits one round of the other
// processes' turns, as their waiters do, not two. A hand-off that fails, or a grant its waiter cannot take, ends the turn at
// once (endTurn). Should the turn end with nobody to end it (a holder that
// never unlocks, a lease lost before Unlock), the first waiter becomes the
// head itself after standbyGrace without a hand-off. Outside a turn (a goroutine of this Client waits
// in Redis: it queued while another took the lock without queueing, or it
// stood by longer than standbyGrace) an Unlock goes through the queue in
// Redis, which serves that head in its order: a local hand-off past it
// would serve goroutines that came after it first.

// localQueueKey identifies the waiters that can share a place: the same
// lock, with the settings that shape its queue entry.
type localQueueKey struct {
	lock        string
	ttl         time.Duration
	maxHold     time.Duration
	waiterLease time.Duration
}

// maxLocalHandoffs bounds local hand-offs in a row (see above): a process
// whose head was granted the lock through Redis passes it on to up to this
// many more of its goroutines before the queue in Redis is served. It
// trades throughput against the longest wait; bench/levers.md has the
// measurements behind the choice.
const maxLocalHandoffs = 7

// standbyGrace is how long the first local waiter of a turn (see "A
// process's turn") waits for a local hand-off before it contends in Redis
// itself. A turn's hand-offs come a critical section apart: after a longer
// one the waiter is queued in Redis, and the holder's Unlock ends the turn
// through the queue, where other processes may come first. Local hand-offs
// are worth their unfairness to those only while a hand-off through Redis
// (a round trip) is a real share of the hold (docs/design.md). A turn that
// ended without an Unlock delays its waiters by no more than this.
const standbyGrace = 10 * time.Millisecond

// localQueue is one Client's waiters for one lock; waiters[0] is the head.
type localQueue struct {
	key     localQueueKey
	waiters []*localWaiter
	lastErr error // the failure the head keeps meeting, if any
	streak  int   // local hand-offs in a row (takeSuccessor)
	// contending: waiters[0] is the head, and waits in Redis. False during
	// this Client's turn (see "A process's turn"): waiters[0] stands by.
	contending bool
}

// localWaiter is one Lock call waiting in a localQueue.
type localWaiter struct {
	m    *Mutex // its own descriptor: its lease gets its options
	wake chan localTurn
	// first is signalled when the waiter becomes waiters[0] of a queue
	// whose turn it is (standByLocked).
	first chan struct{}
}

func newLocalWaiter(m *Mutex) *localWaiter {
	return &localWaiter{m: m, wake: make(chan localTurn, 1), first: make(chan struct{}, 1)}
}

// localTurn is what a waiter behind the head is told: its turn to contend
// (with the place owner holds, or a fresh one when owner is empty); the
// lock itself, handed over locally under owner; to start its Lock over (a
// local hand-off failed); or an error that ends every wait (Close, a
// permanent failure).
type localTurn struct {
	owner   string
	state   *wait.Owner // what the waits for owner learnt, passed on with it
	grant   *localGrant
	restart bool
	err     error
}

// localGrant is a lock handed over by a local Unlock.
type localGrant struct {
	fence int64
	px    time.Duration // the key's expiry as set
	from  time.Time     // before the script was sent: the validity's start
	at    time.Time     // when its reply came: the hand-off's start
}

// localQueues is a Client's local queues.
type localQueues struct {
	mu      sync.Mutex
	queues  map[localQueueKey]*localQueue
	closing bool          // Close has begun: no new queues
	grace   time.Duration // standbyGrace when 0; tests set it before any Lock
}

// standbyGrace is how long the first waiter of a turn stands by.
func (lq *localQueues) standbyGrace() time.Duration {
	if lq.grace > 0 {
		return lq.grace
	}
	return standbyGrace
}

// close stops new queues; heads end their waits with ErrClosed by
// themselves (they watch the Client's closed channel).
func (lq *localQueues) close() {
	lq.mu.Lock()
	lq.closing = true
	lq.mu.Unlock()
}

// lockShared is Mutex.Lock: take the lock at once if nobody of this Client
// waits for it, else wait in the local queue.
func (c *Client) lockShared(ctx context.Context, m *Mutex) (*Lease, error) {
	key := m.localKey()
	began := time.Now()

	c.local.mu.Lock()
	if q := c.local.queues[key]; q != nil {
		w := newLocalWaiter(m)
		q.waiters = append(q.waiters, w)
		q.standByLocked()
		c.local.mu.Unlock()
		return c.awaitTurn(ctx, q, w, began)
	}
	c.local.mu.Unlock()

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

	w := newLocalWaiter(m)
	c.local.mu.Lock()
	if q := c.local.queues[key]; q != nil {
		// Another goroutine became the head meanwhile: join it, and give
		// up this second place in Redis.
		q.waiters = append(q.waiters, w)
		q.standByLocked()
		c.local.mu.Unlock()
		c.notify.Forget(channel, owner)
		c.abandon(ctx, m, &m.cfg, owner, nil, nil)
		return c.awaitTurn(ctx, q, w, began)
	}
	if c.local.closing {
		c.local.mu.Unlock()
		c.notify.Forget(channel, owner)
		c.abandon(ctx, m, &m.cfg, owner, nil, nil)
		return nil, errors.Join(ErrClosed, errs.WaitEnded(ctx, m.name, began, 0, nil))
	}
	if c.local.queues == nil {
		c.local.queues = make(map[localQueueKey]*localQueue)
	}
	q := &localQueue{key: key, waiters: []*localWaiter{w}, contending: true}
	c.local.queues[key] = q
	c.local.mu.Unlock()
	waiting := first // copied, so the uncontended path keeps first on the stack
	return c.contend(ctx, q, w, owner, nil, &waiting, began)
}

// localKey is the local queue m's waiters share.
func (m *Mutex) localKey() localQueueKey {
	return localQueueKey{lock: m.keys.lock, ttl: m.cfg.ttl, maxHold: m.cfg.maxHold, waiterLease: m.cfg.waiterLease}
}

// awaitTurn waits behind the head until it is this waiter's turn to
// contend, or the lock is handed to it, or ctx ends. The first waiter of a
// queue whose turn it is (nobody contending) becomes the head by itself
// when no hand-off came within standbyGrace.
func (c *Client) awaitTurn(ctx context.Context, q *localQueue, w *localWaiter, began time.Time) (*Lease, error) {
	var (
		grace  *time.Timer
		graceC <-chan time.Time
		closed <-chan struct{} // Close ends a wait that stands by too
	)
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	for waiting := true; waiting; {
		standBy := false
		select {
		case t := <-w.wake:
			return c.takeTurn(ctx, q, w, t, began)
		case <-w.first:
			if grace == nil {
				grace = time.NewTimer(c.local.standbyGrace())
				graceC, closed = grace.C, c.closed
			}
		case <-graceC:
			standBy = true
		case <-closed:
			standBy = true
		case <-ctx.Done():
			waiting = false
		}
		if standBy {
			// No hand-off came (or the Client closed): contend as the head,
			// which ends every wait of the queue if the Client is closed.
			c.local.mu.Lock()
			if len(q.waiters) > 0 && q.waiters[0] == w && !q.contending {
				q.contending = true
				c.local.mu.Unlock()
				return c.contend(ctx, q, w, "", nil, nil, began)
			}
			c.local.mu.Unlock()
			graceC, closed = nil, nil // served, or made the head, meanwhile: its message is on its way
		}
	}
	c.local.mu.Lock()
	if len(q.waiters) > 0 && q.waiters[0] == w && q.contending {
		// Promoted as ctx ended: the turn is in the channel; pass it on.
		t := <-w.wake
		c.local.mu.Unlock()
		if t.err == nil {
			c.leave(ctx, q, w, t.owner, t.state)
		}
		return nil, errs.WaitEnded(ctx, w.m.name, began, 0, nil)
	}
	if !q.contains(w) {
		// Taken out of the queue as ctx ended: by endQueue (its error is
		// in the channel), or by an Unlock handing the lock over, whose
		// outcome is on its way. A lock handed over is released again, so
		// that a cancelled Lock leaves nothing behind.
		c.local.mu.Unlock()
		t := <-w.wake
		if t.grant != nil {
			rctx, cancel := detach(ctx, w.m.cfg.releaseTimeout)
			_ = w.m.unlock(rctx, t.owner)
			cancel()
		}
		return nil, errs.WaitEnded(ctx, w.m.name, began, 0, t.err)
	}
	q.remove(w)
	q.standByLocked() // the next one stands by, if w did
	last := q.lastErr
	c.local.mu.Unlock()
	return nil, errs.WaitEnded(ctx, w.m.name, began, 0, last)
}

// takeTurn acts on what a waiter behind the head was told.
func (c *Client) takeTurn(ctx context.Context, q *localQueue, w *localWaiter, t localTurn, began time.Time) (*Lease, error) {
	switch {
	case t.err != nil:
		return nil, t.err
	case t.restart:
		return c.lockShared(ctx, w.m)
	case t.grant != nil:
		r := wait.Result{Granted: true, Fence: t.grant.fence, PTTL: t.grant.px, GrantedAtUs: t.grant.at.UnixMicro()}
		l, err := c.leaseFor(ctx, w.m, &w.m.cfg, t.owner, r, t.grant.from)
		if err != nil {
			c.local.endTurn(q.key, q) // nobody of this Client holds the lock now
		}
		if errors.Is(err, errGrantExpired) {
			if ctx.Err() != nil {
				return nil, errs.WaitEnded(ctx, w.m.name, began, 0, nil)
			}
			return c.lockShared(ctx, w.m) // too slow to take it: start over
		}
		return l, err
	}
	return c.contend(ctx, q, w, t.owner, t.state, nil, began)
}

func (q *localQueue) contains(w *localWaiter) bool {
	for _, x := range q.waiters {
		if x == w {
			return true
		}
	}
	return false
}

func (q *localQueue) remove(w *localWaiter) {
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			return
		}
	}
}
