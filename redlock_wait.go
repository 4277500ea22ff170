package dlock

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/wait"
)

// How RedlockMutex.Lock waits: a release on a node publishes on the lock's
// channel there, and a waiting Lock listens on every node through the node's
// notifier; hearing one node is enough, since a holder releases on every node
// of its quorum. Without enough subscriptions, or after a split vote, it
// retries after a random delay (WithRetryDelay). Within one process, Lock
// calls for a name wait in the Redlock's local line (wait.Line): only its
// head asks the nodes, and an Unlock hands the lock to the head or to the
// first waiter of this process's turn. See docs/redlock.md, "Waiting".

type (
	redlockLine   = wait.Line[string, *RedlockMutex, acquireResult]
	redlockQueue  = wait.Queue[string, *RedlockMutex, acquireResult]
	redlockWaiter = wait.Waiter[*RedlockMutex, acquireResult]
	redlockTurn   = wait.Turn[acquireResult]
)

// redlockEars keep one listener per lock name for as long as Lock calls of
// the Redlock wait for it: a release heard between two heads' turns is not
// lost.
type redlockEars struct {
	mu   sync.Mutex
	ears map[string]*redlockEar
}

// redlockEar is one name's listener and the Lock calls that share it.
type redlockEar struct {
	key   string
	id    string // the line's name on the nodes: the Redlock's lineID
	users int
	// l is made by the first attempt that may need to hear a release (see
	// hear); read and set under redlockEars.mu.
	l *redlockListener
	// since is when the line began to wait (on the monotonic clock, from
	// redlockEpoch): when its first Lock came, or when the line last took
	// the lock from the nodes; listed: an attempt since then failed, so the
	// next ones list the line among those that wait (redlock_acquire.lua).
	// Atomic: every attempt reads them.
	since  atomic.Int64
	listed atomic.Bool
}

// redlockEpoch is the origin of redlockEar.since.
var redlockEpoch = time.Now()

// hear returns the ear of m's lock for one more Lock call, which must give
// it back with unhear.
func (r *Redlock) hear(m *RedlockMutex) *redlockEar {
	r.ears.mu.Lock()
	defer r.ears.mu.Unlock()
	e := r.ears.ears[m.key]
	if e == nil {
		if r.ears.ears == nil {
			r.ears.ears = make(map[string]*redlockEar)
		}
		e = &redlockEar{key: m.key, id: r.lineID}
		e.since.Store(int64(time.Since(redlockEpoch)))
		if r.hears(m.key) {
			// A release could be heard now: listen before the first
			// attempt, so that one published right after it is not lost.
			// Otherwise nothing could hear it anyway, and the listener
			// comes when the first attempt fails (listener): a free lock
			// costs no waiter on the nodes' notifiers.
			e.l = r.listen(m.key)
		}
		r.ears.ears[m.key] = e
	}
	e.users++
	return e
}

// unhear gives e back; its listener stops with its last user.
func (r *Redlock) unhear(e *redlockEar) {
	r.ears.mu.Lock()
	defer r.ears.mu.Unlock()
	if e.users--; e.users > 0 {
		return
	}
	delete(r.ears.ears, e.key)
	if e.l != nil {
		e.l.stop()
	}
}

// waited is how long e's line has waited (see redlockEar.since), and
// whether the nodes may list it.
func (e *redlockEar) waited() (time.Duration, bool) {
	return time.Since(redlockEpoch) - time.Duration(e.since.Load()), e.listed.Load()
}

// attempted records the outcome of an attempt of e's line. A line that
// took the lock starts its wait over (the nodes dropped it from their
// lists), so that the other processes' lines, which have waited longer,
// ask first after its release.
func (e *redlockEar) attempted(took bool) {
	if took {
		e.since.Store(int64(time.Since(redlockEpoch)))
	}
	e.listed.Store(!took)
}

// listener returns e's listener; with make, one is made now if it has
// none, else it may be nil.
func (r *Redlock) listener(e *redlockEar, make bool) *redlockListener {
	r.ears.mu.Lock()
	defer r.ears.mu.Unlock()
	if e.l == nil && make {
		e.l = r.listen(e.key)
	}
	return e.l
}

// heard returns the channel on which e's listener signals a release, nil
// while it has none.
func (r *Redlock) heard(e *redlockEar) <-chan struct{} {
	if l := r.listener(e, false); l != nil {
		return l.signal
	}
	return nil
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
	spin  *wait.Spin // made by the first random delay (backoff)
	tried bool       // subscribed once, successfully or not
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
		return w.backoff(), w.l.hears()
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
		return w.backoff(), false
	}
	return w.idle(res.holderTTL), true
}

// backoff is the next random delay (WithRetryDelay) of a waiter that
// cannot wait for a release.
func (w *redlockWait) backoff() time.Duration {
	if w.spin == nil {
		w.spin = wait.NewSpin(w.m.cfg.retryMin, w.m.cfg.retryMax)
	}
	return w.spin.Next()
}

// idle is how long a waiter that hears releases waits before it asks the
// nodes again: when a quorum of the holder's keys could have expired
// (holderTTL, 0 unknown), and at least every third of the TTL.
func (w *redlockWait) idle(holderTTL time.Duration) time.Duration {
	return wait.LookAgainIn(redlockPX(&w.m.cfg)/3, holderTTL)
}
