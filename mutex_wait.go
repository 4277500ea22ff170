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
// name" and "Local hand-off, bounded". A ReentrantMutex's holds wait in
// the same line (lineLock says how the kinds differ). FairMutex does not
// share: each of its waiters keeps its own place, for strict arrival order.

// lineLock is a lock whose waiters of one Client wait in its local line:
// a Mutex, or a ReentrantMutex's hold.
type lineLock interface {
	queuedLock
	// lineKey is the local queue the lock's waiters share.
	lineKey() localQueueKey
	lineCfg() *config
	// newPlace returns the owner value a head contends under: a fresh one
	// for a Mutex, whose place stands for every waiter of the line; for a
	// reentrant hold, its owner's, after a fresh hold id.
	newPlace() (string, error)
	// sharesPlace reports whether a head that gives up may pass its place
	// to the next waiter: not when the owner value is the waiter's own.
	sharesPlace() bool
	// firstAttempt is the attempt of a Lock that found nobody of its
	// Client waiting; it queues owner, fresh from newPlace, when not
	// granted.
	firstAttempt(ctx context.Context, owner string) (wait.Result, error)
	// held reports whether the waiter's owner holds the lock: a reentrant
	// hold then adds a hold at once rather than wait behind others, and
	// sameOwner picks the waiters that do likewise.
	held() bool
	sameOwner(lineLock) bool
	// transfer is a local hand-off's script: the lock moves from owner to
	// next for px, and next's fencing token comes back; moved is false,
	// and nothing changed, when it is not owner's alone to pass on.
	transfer(ctx context.Context, owner, next string, px time.Duration) (fence int64, moved, resent bool, err error)
	// unlock gives up what a waiter was handed, or its lease.
	unlock(ctx context.Context, owner string) error
	// releaser returns the lock to clean up after places and grants of
	// any owner value: the waiter's own state is its goroutine's.
	releaser() queuedLock
}

// localQueueKey identifies the waiters that can share a place: the same
// lock, with the settings that shape its queue entry.
type localQueueKey struct {
	lock        string
	ttl         time.Duration
	maxHold     time.Duration
	waiterLease time.Duration
	permits     int // a Semaphore's waiters: the permits each asks for
}

// localGrant is a lock handed over by a local Unlock.
type localGrant struct {
	fence int64
	px    time.Duration // the key's expiry as set
	from  time.Time     // before the script was sent: the validity's start
	at    time.Time     // when its reply came: the hand-off's start
}

type (
	mutexLine   = wait.Line[localQueueKey, lineLock, localGrant]
	mutexQueue  = wait.Queue[localQueueKey, lineLock, localGrant]
	mutexWaiter = wait.Waiter[lineLock, localGrant]
	mutexTurn   = wait.Turn[localGrant]
)

var _ lineLock = (*Mutex)(nil)

func (m *Mutex) lineKey() localQueueKey {
	return localQueueKey{lock: m.keys.lock, ttl: m.cfg.ttl, maxHold: m.cfg.maxHold, waiterLease: m.cfg.waiterLease}
}

func (m *Mutex) lineCfg() *config { return &m.cfg }

func (m *Mutex) newPlace() (string, error) { return ownerid.New(m.cfg.ownerInfo) }

func (m *Mutex) sharesPlace() bool { return true }

func (m *Mutex) firstAttempt(ctx context.Context, owner string) (wait.Result, error) {
	return m.acquire(ctx, owner, flagNewOwner) // owner is new: never queued
}

func (m *Mutex) held() bool { return false }

func (m *Mutex) sameOwner(lineLock) bool { return false }

func (m *Mutex) releaser() queuedLock { return m }

// lockShared is the wait of every lineLock (Mutex.Lock, ReentrantMutex.Lock,
// RWMutex.Lock, a Semaphore's Acquire of all its permits): take the lock
// at once if nobody of this Client waits for it (or, for a reentrant
// owner, if it holds the lock), else wait in the local line.
func (c *Client) lockShared(ctx context.Context, d lineLock) (*Lease, error) {
	key := d.lineKey()
	cfg := d.lineCfg()
	began := time.Now()
	if d.held() {
		// A further hold of a reentrant owner: no line.
		owner, err := d.newPlace()
		if err != nil {
			return nil, err
		}
		return c.acquireAs(ctx, d, cfg, true, owner)
	}
	if q, w := c.local.Join(key, d); q != nil {
		c.unblockNested(key, d)
		return c.awaitTurn(ctx, q, w, began)
	}

	// Nobody of ours waits: one attempt, which queues in Redis if taken.
	owner, err := d.newPlace()
	if err != nil {
		return nil, err
	}
	channel := d.channel()
	first := wait.First{Start: time.Now(), Confirmed: c.notify.Expect(channel, owner)}
	countAttempt(ctx, cfg)
	first.Result, first.Err = d.firstAttempt(ctx, owner)
	if first.Err == nil && first.Result.Granted {
		if first.Confirmed {
			c.notify.Forget(channel, owner)
		}
		l, err := c.leaseFor(ctx, d, cfg, owner, first.Result, first.Start)
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
		c.abandon(ctx, d.releaser(), cfg, owner, first.Err, nil)
		last := errs.ErrNoAnswer
		if !errors.Is(first.Err, context.Canceled) && !errors.Is(first.Err, context.DeadlineExceeded) {
			last = first.Err
		}
		return nil, errs.WaitEnded(ctx, d.lockName(), began, 0, last)
	case !errs.IsTransient(first.Err):
		c.abandon(ctx, d.releaser(), cfg, owner, first.Err, nil)
		_, verb := verbsOf(d)
		return nil, errs.Redis(verb, d.lockName(), first.Err)
	}

	q, w, joined, closed := c.local.Start(key, d)
	switch {
	case joined:
		// Another goroutine became the head meanwhile: join it, and give
		// up this second place in Redis.
		c.notify.Forget(channel, owner)
		c.abandon(ctx, d.releaser(), cfg, owner, nil, nil)
		c.unblockNested(key, d)
		return c.awaitTurn(ctx, q, w, began)
	case closed:
		c.notify.Forget(channel, owner)
		c.abandon(ctx, d.releaser(), cfg, owner, nil, nil)
		return nil, errors.Join(ErrClosed, errs.WaitEnded(ctx, d.lockName(), began, 0, nil))
	}
	waiting := first // copied, so the uncontended path keeps first on the stack
	return c.contend(ctx, q, w, owner, nil, &waiting, began)
}

// unblockNested takes d back out of the line it joined when its owner
// holds the lock: a grant to the owner, made as d joined, plucked the
// owner's waiters before d was among them.
func (c *Client) unblockNested(key localQueueKey, d lineLock) {
	if d.held() {
		c.local.Pluck(key, d.sameOwner)
	}
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
			rctx, cancel := detach(ctx, w.D.lineCfg().releaseTimeout)
			_ = w.D.unlock(rctx, t.Owner)
			cancel()
		}
		last = t.Err
	}
	return nil, errs.WaitEnded(ctx, w.D.lockName(), began, 0, last)
}

// takeTurn acts on what a waiter behind the head was told.
func (c *Client) takeTurn(ctx context.Context, q *mutexQueue, w *mutexWaiter, t mutexTurn, began time.Time) (*Lease, error) {
	d := w.D
	switch {
	case t.Err != nil:
		return nil, t.Err
	case t.Restart:
		return c.lockShared(ctx, d)
	case t.Grant != nil:
		g := t.Grant
		r := wait.Result{Granted: true, Fence: g.fence, PTTL: g.px, GrantedAtUs: g.at.UnixMicro()}
		l, err := c.leaseFor(ctx, d, d.lineCfg(), t.Owner, r, g.from)
		if err != nil {
			c.local.EndTurn(q.Key(), q) // nobody of this Client holds the lock now
		}
		if errors.Is(err, errGrantExpired) {
			if ctx.Err() != nil {
				return nil, errs.WaitEnded(ctx, d.lockName(), began, 0, nil)
			}
			return c.lockShared(ctx, d) // too slow to take it: start over
		}
		return l, err
	}
	return c.contend(ctx, q, w, t.Owner, t.State, nil, began)
}

// leave is a head giving up: the next local waiter takes over its place
// (owner, with st, what the waits for it learnt), or, with none (or when
// the place is the head's own), the place is given up in Redis.
func (c *Client) leave(ctx context.Context, q *mutexQueue, head *mutexWaiter, owner string, st *wait.Owner) {
	d := head.D
	if !d.sharesPlace() {
		c.local.Leave(q, head, "", nil)
		if owner != "" {
			c.abandon(ctx, d.releaser(), d.lineCfg(), owner, nil, st)
		}
		return
	}
	if nobody, _ := c.local.Leave(q, head, owner, st); nobody {
		c.abandon(ctx, d.releaser(), d.lineCfg(), owner, nil, st)
	}
}

// contend is the head's wait in Redis under owner (a fresh place when
// empty; st is what the waits for owner learnt before, when a head passed
// its place on; first is the attempt that queued it, if just made). The
// head takes the lease it is granted and promotes the next waiter.
func (c *Client) contend(ctx context.Context, q *mutexQueue, w *mutexWaiter, owner string, st *wait.Owner, first *wait.First, began time.Time) (*Lease, error) {
	d := w.D
	cfg := d.lineCfg()
	for {
		if owner == "" {
			var err error
			if owner, err = d.newPlace(); err != nil {
				c.local.EndQueue(q, err)
				return nil, err
			}
			st = nil
		}
		if st == nil {
			st = &wait.Owner{}
		}
		place := owner
		r, from, err := c.waits.Wait(ctx, cfg.waitSettings(), wait.Spec{
			Name:    d.lockName(),
			Channel: d.channel(),
			Owner:   owner,
			State:   st,
			First:   first,
			NoteErr: func(err error) { c.local.NoteErr(q, err) },
			Attempt: func(ctx context.Context) (wait.Result, error) { return d.attempt(ctx, place, true) },
			// No abandon: a head that gives up passes its place on, with
			// st (leave), and it is cleaned up only when nobody takes it.
		})
		first = nil
		switch {
		case err == nil:
			l, err := c.leaseFor(ctx, d, cfg, owner, r, from)
			if errors.Is(err, errGrantExpired) {
				if ctx.Err() != nil {
					// Nothing is held and the place is spent: the next
					// local waiter queues afresh.
					c.local.Promote(q, w, false)
					return nil, errs.WaitEnded(ctx, d.lockName(), began, 0, nil)
				}
				if len(st.Pending) > 0 {
					// An attempt for it may still land and queue it.
					c.abandon(ctx, d.releaser(), cfg, owner, nil, st)
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
			c.abandon(ctx, d.releaser(), cfg, owner, err, st)
			c.local.EndQueue(q, err)
			return nil, err
		}
	}
}

// handOff is a line lock's Unlock: straight to a goroutine of this Client
// that waits for the lock when the local hand-off allows it. With done
// false, the caller releases the lock through its queue in Redis.
func (c *Client) handOff(ctx context.Context, d lineLock, owner string) (done bool, err error) {
	key := d.lineKey()
	// A transfer has no WAIT of its own: with replica acks, through Redis.
	ok := handsOver
	if d.lineCfg().replicaAck > 0 {
		ok = refusesHandoff
	}
	w, _ := c.local.Successor(key, 0, ok)
	if w == nil {
		return false, nil
	}
	// A hand-off that fails ends this Client's turn: the waiter starts
	// over, behind the first local waiter, which queues in Redis again.
	restart := func() {
		c.local.EndTurn(key, nil)
		w.Give(mutexTurn{Restart: true})
	}
	next, err := w.D.newPlace()
	if err != nil {
		restart()
		return false, nil
	}
	wcfg := w.D.lineCfg()
	g := &localGrant{px: wcfg.initialPX(), from: time.Now()}
	fence, moved, resent, err := d.transfer(ctx, owner, next, g.px)
	g.fence = fence
	if err != nil && errs.IsReply(err) && !resent {
		// The script refused before writing anything: Redis at
		// maxmemory refuses a script whose first write may grow memory,
		// as the hand-off's INCR does, and a foreign fencing key is
		// reported before any write. The lock is still owner's, so the
		// waiter starts over and the release through the queue in Redis
		// frees the lock: its first write frees memory, and it reports a
		// foreign key after releasing.
		// Not when the Redis client sent the script twice: the error may
		// be the second sending's, after the first moved the lock to next.
		restart()
		return false, nil
	}
	if err != nil {
		// The waiter starts its Lock over. After a failure that leaves
		// it unknown whether the script ran, next may hold the key, for
		// a whole TTL, and nobody knows next: it is given back once the
		// call is done with, as a waiter's place is after an abandoned
		// attempt, so the lock never stays held by nobody until it
		// expires.
		restart()
		if !errors.Is(err, ErrNotHeld) {
			c.abandon(ctx, w.D.releaser(), wcfg, next, err, nil)
		}
		return true, err
	}
	if !moved {
		// The lock is not the holder's alone to pass on (a reentrant
		// owner's hold taken meanwhile, permits given back in part): the
		// waiter starts over, and the lock goes through Redis.
		restart()
		return false, nil
	}
	g.at = time.Now()
	w.Give(mutexTurn{Owner: next, Grant: g})
	return true, nil
}

// handsOver reports whether a local hand-off may serve d's waiter: not
// with replica acks, since a transfer has no WAIT of its own.
func handsOver(d lineLock) bool { return d.lineCfg().replicaAck == 0 }

func refusesHandoff(lineLock) bool { return false }
