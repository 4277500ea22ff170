package dlock

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/wait"
)

// How RedlockMutex.Lock waits: a release on a node publishes on the lock's
// channel there, and a waiting Lock listens on every node through the node's
// notifier; hearing one node is enough, since a holder releases on every node
// of its quorum. Without enough subscriptions, or after a split vote, it
// retries after a random delay (WithRetryDelay). Within one process, Lock
// calls for a name take turns (redlockGates): only the first waits on the
// nodes. See docs/redlock.md, "Waiting".

// redlockGates let one Lock call per lock name at a time wait in Redis; the
// others queue behind it in arrival order.
type redlockGates struct {
	mu    sync.Mutex
	gates map[string]*redlockGate
}

// redlockGate is one name's line: line[0] holds the turn. The gate goes when
// the line is empty.
type redlockGate struct {
	name string // the lock's key, its key in redlockGates
	line []*redlockTurn
	// l listens for the lock's releases on behalf of whoever is first in
	// line, from the first attempt that may need to hear one (see enter)
	// for as long as the line exists: a release heard between two turns is
	// not lost. Set (under redlockGates.mu) and read by the first in line
	// only, and by leave as the line ends.
	l *redlockListener
}

// redlockTurn is one Lock call's place at its gate. The first in line
// attempts on the nodes and waits for releases, and an Unlock of the same
// Redlock may hand it the lock directly (redlock_handoff.go).
type redlockTurn struct {
	g    *redlockGates
	gt   *redlockGate  // its line, which lasts while the turn is in it
	m    *RedlockMutex // the Lock's descriptor: a hand-off uses its options
	wake chan struct{} // capacity 1: first in line now
	// inherited is set (before wake) when the turn came from a Lock that
	// took the lock: this process holds it, and its Unlock hands it over or
	// publishes its release, so the turn need not ask the nodes first.
	inherited bool
	// handoff brings the outcome of a hand-off to this turn (capacity 1):
	// exactly one after taken was set (under g.mu) by the Unlock handing
	// the lock over.
	handoff chan redlockHandoff
	taken   bool
}

// enter lines up for the turn of m's lock and waits until it is first in
// line. It returns ctx's error or ErrClosed when those come first. The
// caller must leave the turn.
func (g *redlockGates) enter(ctx context.Context, closed <-chan struct{}, m *RedlockMutex) (*redlockTurn, error) {
	g.mu.Lock()
	gt := g.gates[m.key]
	if gt == nil {
		if g.gates == nil {
			g.gates = make(map[string]*redlockGate)
		}
		gt = &redlockGate{name: m.key}
		if m.r.hears(m.key) {
			// A release could be heard now: listen before the first
			// attempt, so that one published right after it is not lost.
			// Otherwise nothing could hear it anyway, and the listener
			// comes when the first attempt fails (turn.listener): a free
			// lock costs no waiter on the nodes' notifiers.
			gt.l = m.r.listen(m.key)
		}
		g.gates[m.key] = gt
	}
	t := &redlockTurn{g: g, gt: gt, m: m, wake: make(chan struct{}, 1), handoff: make(chan redlockHandoff, 1)}
	gt.line = append(gt.line, t)
	first := len(gt.line) == 1
	g.mu.Unlock()
	if first {
		return t, nil
	}
	var err error
	select {
	case <-t.wake:
		return t, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-closed:
		err = ErrClosed
	}
	g.mu.Lock()
	if gt.line[0] == t {
		// First in line as ctx ended: pass the turn on.
		g.mu.Unlock()
		t.leave(ctx, false)
		return nil, err
	}
	gt.remove(t)
	g.mu.Unlock()
	return nil, err
}

// handingOver reports whether an Unlock is handing the lock to the turn:
// then the turn takes that outcome rather than attempt.
func (t *redlockTurn) handingOver() bool {
	t.g.mu.Lock()
	defer t.g.mu.Unlock()
	return t.taken
}

// received notes that the turn took a hand-off's outcome.
func (t *redlockTurn) received() {
	t.g.mu.Lock()
	t.taken = false
	t.g.mu.Unlock()
}

// leave ends the first in line's turn, holding the lock or not: the next in
// line gets it at once. A hand-off still on its way is awaited (its Unlock
// is bounded by the old lease's stragglers and the node timeout) and
// released again, so that a Lock that gave up, or took the lock by an
// attempt of its own meanwhile, leaves nothing behind; that is done by one
// of the Redlock's workers (Close waits for it), so that the Lock returns
// when its ctx ends rather than when the hand-off does. The hand-off's
// owner value is fresh and only that worker uses it. The next in line does
// not count on the hand-off: it asks the nodes, and hears the worker's
// release like any other.
func (t *redlockTurn) leave(ctx context.Context, holding bool) {
	t.g.mu.Lock()
	gt := t.gt
	gt.remove(t)
	if len(gt.line) == 0 {
		delete(t.g.gates, gt.name)
		if gt.l != nil {
			gt.l.stop()
		}
	} else {
		gt.line[0].inherited = holding
		gt.line[0].wake <- struct{}{}
	}
	taken := t.taken
	t.g.mu.Unlock()
	if taken {
		t.m.r.workers.Go(func() { t.releaseHandoff(ctx) })
	}
}

// releaseHandoff waits for the outcome of a hand-off to a turn that has
// left, and releases what it got. Its wait ignores ctx: the Unlock that
// marked the turn taken always sends an outcome.
func (t *redlockTurn) releaseHandoff(ctx context.Context) {
	h := <-t.handoff
	t.received()
	if h.res.hold == nil {
		return
	}
	rctx, cancel := detach(ctx, t.m.cfg.releaseTimeout)
	defer cancel()
	if err := h.res.hold.release(rctx, h.owner); err != nil {
		t.m.cfg.logger.Warn("dlock: could not release a Redlock lock handed over to a Lock that gave up; the lock's key expires by its TTL",
			slog.String("lock", t.m.name), slog.Any("error", err))
	}
}

// remove takes t out of the line, if there.
func (gt *redlockGate) remove(t *redlockTurn) {
	for i, x := range gt.line {
		if x == t {
			gt.line = append(gt.line[:i], gt.line[i+1:]...)
			return
		}
	}
}

// redlockListener is a line's ear on every node: a waiter in each node's
// notifier, all sharing one signal.
type redlockListener struct {
	r       *Redlock
	channel string
	signal  chan struct{}
	waiters []*notify.Waiter
}

// listen registers a waiter on channel at every node. Register before the
// first attempt, so that a release right after it is heard; stop
// unregisters. The waiters' owner value only matters to grants, which a
// Redlock never publishes.
func (r *Redlock) listen(channel string) *redlockListener {
	l := &redlockListener{r: r, channel: channel, signal: make(chan struct{}, 1), waiters: make([]*notify.Waiter, len(r.nodes))}
	for i, n := range r.nodes {
		l.waiters[i] = n.notify.RegisterSignal(channel, "redlock", l.signal)
	}
	return l
}

func (l *redlockListener) stop() {
	for i, n := range l.r.nodes {
		n.notify.Unregister(l.channel, l.waiters[i])
	}
}

// hears reports whether enough nodes' subscriptions are in place for any
// holder's release to reach the waiter (see above).
func (l *redlockListener) hears() bool { return l.r.hears(l.channel) }

// hears reports whether channel is subscribed on enough nodes to hear any
// holder's release.
func (r *Redlock) hears(channel string) bool {
	n := len(r.nodes)
	confirmed := 0
	for _, nd := range r.nodes {
		if nd.notify.Confirmed(channel) {
			confirmed++
		}
	}
	return confirmed >= n-quorum(n)+1
}

// listener returns the line's listener, made now if the line has none.
func (t *redlockTurn) listener() *redlockListener {
	t.g.mu.Lock()
	defer t.g.mu.Unlock()
	if t.gt.l == nil {
		t.gt.l = t.m.r.listen(t.gt.name)
	}
	return t.gt.l
}

// subscribe subscribes the channel on every node at once, each bounded by
// timeout, and waits until enough nodes are subscribed to hear any holder's
// release (hears), every node has answered, or ctx ends. The subscriptions
// still under way go on in the background: a silent node is not waited for
// (redlock_silent.go). It returns the failures seen, to report when too
// few nodes could be heard.
func (l *redlockListener) subscribe(ctx context.Context, timeout time.Duration) error {
	type outcome struct {
		i   int
		err error
	}
	// Buffered: a subscription that ends after the wait never blocks.
	results := make(chan outcome, len(l.r.nodes))
	asked := 0
	detached := context.WithoutCancel(ctx)
	for i, nd := range l.r.nodes {
		if nd.notify.Confirmed(l.channel) {
			continue
		}
		asked++
		i, nd := i, nd
		l.r.workers.Go(func() {
			sctx, cancel := context.WithTimeout(detached, timeout)
			defer cancel()
			results <- outcome{i, nd.notify.Subscribe(sctx, l.channel)}
		})
	}
	list := make([]error, len(l.r.nodes))
	for got := 0; got < asked && !l.hears(); got++ {
		select {
		case o := <-results:
			if o.err != nil {
				list[o.i] = &NodeError{Addr: l.r.nodes[o.i].addr, Err: o.err}
			}
		case <-ctx.Done():
			return errors.Join(append(list, ctx.Err())...)
		}
	}
	return errors.Join(list...)
}

// drain forgets a wake-up heard before now.
func (l *redlockListener) drain() {
	select {
	case <-l.signal:
	default:
	}
}

// redlockWait is how a waiting Lock spaces its attempts.
type redlockWait struct {
	m     *RedlockMutex
	l     *redlockListener
	spin  *wait.Spin
	tried bool // subscribed once, successfully or not
}

// next returns how long to wait after the failed attempt res, which began
// while the listener heard (or not) every holder, and whether a wake-up may
// cut the wait short. It subscribes after the first failure.
func (w *redlockWait) next(ctx context.Context, res acquireResult, heardBefore bool) (delay time.Duration, wake bool) {
	m := w.m
	n := len(m.r.nodes)
	if res.held < quorum(n) {
		// Too few nodes answered, or a split vote: no owner holds a quorum,
		// so none may be left to publish a release, and contenders that
		// split the nodes must spread out. A release heard meanwhile
		// (another owner's quorum) still cuts the wait short.
		return w.spin.Next(), w.l.hears()
	}
	if !w.tried {
		w.tried = true
		err := w.l.subscribe(ctx, redlockNodeTimeout(&m.cfg))
		switch {
		case !w.l.hears():
			if ctx.Err() == nil {
				m.cfg.logger.Warn("dlock: cannot subscribe on enough Redlock nodes; waiting by polling",
					slog.String("lock", m.name), slog.Any("error", err))
			}
		case !heardBefore:
			// A release published before the subscriptions were in place
			// went unheard: ask once more now.
			return 0, false
		}
	}
	if !w.l.hears() {
		return w.spin.Next(), false
	}
	return w.idle(res.holderTTL), true
}

// idle is how long a waiter that hears releases waits before it asks the
// nodes again: when a quorum of the holder's keys could have expired
// (holderTTL, 0 unknown), and at least every third of the TTL.
func (w *redlockWait) idle(holderTTL time.Duration) time.Duration {
	return wait.LookAgainIn(redlockPX(&w.m.cfg)/3, holderTTL)
}
