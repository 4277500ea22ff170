package wait

import (
	"context"
	"sync"
	"time"
)

// Line is a process's local line: the goroutines of one Client (or
// Redlock) that wait for the same lock queue in it, in arrival order, and
// only the first of them, the head, contends for the lock in Redis, on
// behalf of them all. An Unlock of the lock by this process may hand it
// straight to a waiter (Successor), up to MaxLocalHandoffs times in a row;
// then the lock goes through Redis, so that other processes get their
// turn. docs/waiting.md, "Local hand-off, bounded", states the rule.
//
// K names a queue (the lock and the settings its waiters must share), D is
// a waiter's descriptor, G what a hand-off gives a waiter.
type Line[K comparable, D, G any] struct {
	// HandToHead lets an Unlock hand the lock to a head that contends,
	// when no queue in Redis orders the waiters (Redlock): the head is
	// marked taken and its grant comes on its channel. Without it, only a
	// waiter standing by in this process's turn is handed the lock, and a
	// head that contends is served by the queue in Redis, in its order.
	HandToHead bool

	mu      sync.Mutex
	queues  map[K]*Queue[K, D, G]
	closing bool          // Close has begun: no new queues
	grace   time.Duration // StandbyGrace when 0; tests set it
}

// MaxLocalHandoffs bounds local hand-offs in a row: a process that got
// the lock passes it on to up to this many more of its goroutines before
// the lock goes through Redis. It trades throughput against the longest
// wait; bench/levers.md has the measurements behind the choice.
const MaxLocalHandoffs = 7

// StandbyGrace is how long the first local waiter of a turn waits for a
// local hand-off before it contends in Redis itself, unless the kind gives
// its own: a turn's hand-offs come a critical section apart, and after a
// longer one a hand-off through Redis costs little of the hold.
const StandbyGrace = 10 * time.Millisecond

// Queue is one lock's local waiters; waiters[0] is the head.
type Queue[K comparable, D, G any] struct {
	key     K
	waiters []*Waiter[D, G]
	lastErr error // the failure the head keeps meeting, if any
	streak  int   // local hand-offs in a row
	// contending: waiters[0] is the head and contends in Redis. False
	// during this process's turn: waiters[0] stands by for a hand-off.
	contending bool
}

// Waiter is one acquire waiting in a Queue.
type Waiter[D, G any] struct {
	D     D // its descriptor: a hand-off uses its options
	wake  chan Turn[G]
	first chan struct{} // it became waiters[0] of a queue in its turn
	taken bool          // HandToHead: a hand-off to this contending head is on its way
}

// Turn is what a waiter is told: its turn to contend (with the place
// Owner holds and what its waits learnt, State, or a fresh one when Owner
// is empty; Held when its process still holds the lock and an Unlock is
// releasing it); the lock itself (Grant, held by Owner); to start its
// acquire over (Restart); or an error that ends every wait (Err).
type Turn[G any] struct {
	Owner   string
	State   *Owner
	Grant   *G
	Held    bool
	Restart bool
	Err     error
}

// Awaited is how a waiter's Await ended.
type Awaited int

const (
	// Woken: the waiter was told its Turn.
	Woken Awaited = iota
	// Head: no hand-off came within the grace (or the Client closed): the
	// waiter contends as the head, under a fresh owner.
	Head
	// Left: ctx ended and the waiter left the line; Await's error is the
	// head's last failure.
	Left
	// PassOn: ctx ended just as the waiter was made the head: the Turn is
	// its place, to pass on with Leave.
	PassOn
	// Outcome: ctx ended after an Unlock took the waiter out of the line
	// to hand it the lock; the outcome comes on Outcome's channel.
	Outcome
)

// SetGrace sets the standby grace of kinds that give none; call it before
// the first wait.
func (ln *Line[K, D, G]) SetGrace(d time.Duration) { ln.grace = d }

// Close stops new queues; heads end their waits by themselves (they watch
// their Client's closed channel).
func (ln *Line[K, D, G]) Close() {
	ln.mu.Lock()
	ln.closing = true
	ln.mu.Unlock()
}

// Join puts a waiter with d behind the queue of key, if there is one.
func (ln *Line[K, D, G]) Join(key K, d D) (*Queue[K, D, G], *Waiter[D, G]) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	q := ln.queues[key]
	if q == nil {
		return nil, nil
	}
	w := newWaiter[D, G](d)
	q.join(w)
	return q, w
}

// Start makes a waiter with d the contending head of a new queue of key;
// when a queue of key exists by now, it joins that one (joined). It fails
// (closed) once Close has begun.
func (ln *Line[K, D, G]) Start(key K, d D) (q *Queue[K, D, G], w *Waiter[D, G], joined, closed bool) {
	w = newWaiter[D, G](d)
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if q = ln.queues[key]; q != nil {
		q.join(w)
		return q, w, true, false
	}
	if ln.closing {
		return nil, nil, false, true
	}
	if ln.queues == nil {
		ln.queues = make(map[K]*Queue[K, D, G])
	}
	q = &Queue[K, D, G]{key: key, waiters: []*Waiter[D, G]{w}, contending: true}
	ln.queues[key] = q
	return q, w, false, false
}

func newWaiter[D, G any](d D) *Waiter[D, G] {
	return &Waiter[D, G]{D: d, wake: make(chan Turn[G], 1), first: make(chan struct{}, 1)}
}

func (q *Queue[K, D, G]) join(w *Waiter[D, G]) {
	q.waiters = append(q.waiters, w)
	q.standByLocked()
}

// Await waits behind the head until the waiter is told its Turn, becomes
// the head after grace (StandbyGrace or the Line's when 0) of standing by
// first in its process's turn, or ctx ends; see Awaited for the outcomes.
// closed (the Client closing) and heard (a release heard, nil when the
// kind hears none) end a wait that stands by.
func (ln *Line[K, D, G]) Await(ctx context.Context, q *Queue[K, D, G], w *Waiter[D, G], grace time.Duration, closed, heard <-chan struct{}) (Turn[G], Awaited, error) {
	var (
		timer          *time.Timer
		graceC         <-chan time.Time
		closeC, heardC <-chan struct{}
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for waiting := true; waiting; {
		standBy := false
		select {
		case t := <-w.wake:
			return t, Woken, nil
		case <-w.first:
			if timer == nil {
				timer = time.NewTimer(ln.graceOr(grace))
				graceC, closeC, heardC = timer.C, closed, heard
			}
		case <-graceC:
			standBy = true
		case <-closeC:
			standBy = true
		case <-heardC:
			standBy = true
		case <-ctx.Done():
			waiting = false
		}
		if standBy {
			ln.mu.Lock()
			if len(q.waiters) > 0 && q.waiters[0] == w && !q.contending {
				q.contending = true
				ln.mu.Unlock()
				return Turn[G]{}, Head, nil
			}
			ln.mu.Unlock()
			graceC, closeC, heardC = nil, nil, nil // served, or made the head, meanwhile: its message is on its way
		}
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	switch {
	case len(q.waiters) > 0 && q.waiters[0] == w && q.contending:
		return <-w.wake, PassOn, nil // promoted as ctx ended: the turn is in the channel
	case !q.contains(w):
		// Taken out as ctx ended: by EndQueue, whose error is in the
		// channel, or by an Unlock handing the lock over.
		return Turn[G]{}, Outcome, nil
	}
	q.remove(w)
	q.standByLocked() // the next one stands by, if w did
	return Turn[G]{}, Left, q.lastErr
}

func (ln *Line[K, D, G]) graceOr(d time.Duration) time.Duration {
	switch {
	case d > 0:
		return d
	case ln.grace > 0:
		return ln.grace
	}
	return StandbyGrace
}

// Outcome is the channel on which a waiter taken out of its line to be
// handed the lock hears how the hand-off went (Await's Outcome).
func (w *Waiter[D, G]) Outcome() <-chan Turn[G] { return w.wake }

// Give tells w, which Successor took, the outcome of its hand-off.
func (w *Waiter[D, G]) Give(t Turn[G]) {
	w.wake <- t
}

// NoteErr records the failure the head of q keeps meeting, which the
// waiters behind it report when they give up.
func (ln *Line[K, D, G]) NoteErr(q *Queue[K, D, G], err error) {
	ln.mu.Lock()
	q.lastErr = err
	ln.mu.Unlock()
}
