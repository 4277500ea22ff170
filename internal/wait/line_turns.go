package wait

// Successor takes out of the queue of key the waiter an Unlock of the lock
// may hand the lock to, and returns it with the hand-off's place in the
// streak (1 for the first in a row). It returns nil when the Unlock must go
// through Redis: nobody waits, ok refuses the waiter, the Line is closing,
// the streak is full, or the head contends in Redis (unless HandToHead);
// the process's turn then ends. handoffs is the streak that led to the
// lease being unlocked, when the kind counts it on the lease.
//
// Only the first waiter can be handed the lock: while a goroutine of this
// process contends in Redis, the queue there serves it, and nobody behind
// it goes first. With HandToHead the head itself is handed the lock: it
// stays first in line, marked taken, until it takes the outcome.
func (ln *Line[K, D, G]) Successor(key K, handoffs int, ok func(D) bool) (*Waiter[D, G], int) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	q := ln.queues[key]
	if q == nil {
		return nil, 0
	}
	streak := max(q.streak, handoffs)
	refuse := ln.closing || len(q.waiters) == 0 || streak >= MaxLocalHandoffs || !ok(q.waiters[0].D)
	if !refuse && q.contending {
		refuse = !ln.HandToHead || q.waiters[0].taken
	}
	if refuse {
		q.streak = 0 // this Unlock goes through Redis
		ln.endTurnLocked(q, true)
		return nil, 0
	}
	q.streak = streak + 1
	w := q.waiters[0]
	if q.contending {
		w.taken = true
		return w, q.streak
	}
	q.waiters = append(q.waiters[:0], q.waiters[1:]...)
	q.standByLocked()
	return w, q.streak
}

// Taken reports whether a hand-off to w, a contending head, is on its way
// (HandToHead): then it takes that outcome rather than contend.
func (ln *Line[K, D, G]) Taken(w *Waiter[D, G]) bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return w.taken
}

// Received notes that the head w took its hand-off's outcome.
func (ln *Line[K, D, G]) Received(w *Waiter[D, G]) {
	ln.mu.Lock()
	w.taken = false
	ln.mu.Unlock()
}

// EndTurn ends this process's turn on the lock of key after its local
// hand-offs stopped without an Unlock through Redis (a hand-off failed, a
// lease could not be taken). With q set, only if the queue is still q.
func (ln *Line[K, D, G]) EndTurn(key K, q *Queue[K, D, G]) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if cur := ln.queues[key]; cur != nil && (q == nil || cur == q) {
		ln.endTurnLocked(cur, false)
	}
}

// endTurnLocked makes the first waiter the head again, to contend in
// Redis before the lock is released there (held: the release is on its
// way); with no waiter left, the queue goes.
func (ln *Line[K, D, G]) endTurnLocked(q *Queue[K, D, G], held bool) {
	switch {
	case q.contending:
	case len(q.waiters) == 0:
		ln.deleteLocked(q)
	default:
		q.contending = true
		q.waiters[0].wake <- Turn[G]{Held: held} // it stood by: nothing else in its channel
	}
}

// standByLocked tells the first waiter, during this process's turn, that
// it is first (Await's grace starts).
func (q *Queue[K, D, G]) standByLocked() {
	if !q.contending && len(q.waiters) > 0 {
		select {
		case q.waiters[0].first <- struct{}{}:
		default:
		}
	}
}

// Promote ends the head's wait and gives the queue its next head: with
// turn (the head holds the lock now) this process's turn begins and the
// waiters stand by for its hand-offs; without, the next waiter contends
// under a fresh owner. It reports whether a hand-off to the head is still
// on its way (HandToHead), which the caller must take from Outcome and
// release.
func (ln *Line[K, D, G]) Promote(q *Queue[K, D, G], head *Waiter[D, G], turn bool) (taken bool) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	q.remove(head)
	switch {
	case len(q.waiters) == 0:
		ln.deleteLocked(q)
	case turn:
		q.contending = false
		q.streak = 0
		q.standByLocked()
	default:
		q.waiters[0].wake <- Turn[G]{}
	}
	return head.taken
}

// Leave is a head giving up: the next waiter takes over its place (owner,
// with st, what the waits for it learnt). It reports whether nobody took
// the place, which the caller then gives up in Redis, and, as Promote,
// whether a hand-off to the head is on its way.
func (ln *Line[K, D, G]) Leave(q *Queue[K, D, G], head *Waiter[D, G], owner string, st *Owner) (nobody, taken bool) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	q.remove(head)
	if len(q.waiters) > 0 {
		q.waiters[0].wake <- Turn[G]{Owner: owner, State: st}
		return false, head.taken
	}
	ln.deleteLocked(q)
	return true, head.taken
}

// EndQueue gives err to every waiter behind the head and drops q.
func (ln *Line[K, D, G]) EndQueue(q *Queue[K, D, G], err error) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	for i, w := range q.waiters {
		if i > 0 { // the head (0) is the caller
			w.wake <- Turn[G]{Err: err}
		}
	}
	q.waiters = nil
	ln.deleteLocked(q)
}

func (ln *Line[K, D, G]) deleteLocked(q *Queue[K, D, G]) {
	if ln.queues[q.key] == q {
		delete(ln.queues, q.key)
	}
}

func (q *Queue[K, D, G]) contains(w *Waiter[D, G]) bool {
	for _, x := range q.waiters {
		if x == w {
			return true
		}
	}
	return false
}

func (q *Queue[K, D, G]) remove(w *Waiter[D, G]) {
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			return
		}
	}
}

// Count returns how many queues match and how many waiters they hold;
// with one match, whether a hand-off to its head is on its way. Tests
// line goroutines up with it.
func (ln *Line[K, D, G]) Count(match func(K) bool) (queues, waiters int, taken bool) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	for k, q := range ln.queues {
		if match(k) {
			queues++
			waiters += len(q.waiters)
			taken = len(q.waiters) > 0 && q.waiters[0].taken
		}
	}
	return queues, waiters, taken
}

// Key returns the key q is the queue of.
func (q *Queue[K, D, G]) Key() K { return q.key }

// Pluck takes out of the queue of key the waiters match selects, except a
// head that contends in Redis, and tells them to start their acquire over
// (Restart): a reentrant owner that holds the lock adds a hold at once
// rather than wait behind others for a lock it holds.
func (ln *Line[K, D, G]) Pluck(key K, match func(D) bool) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	q := ln.queues[key]
	if q == nil {
		return
	}
	kept := q.waiters[:0]
	for i, w := range q.waiters {
		if (i == 0 && q.contending) || !match(w.D) {
			kept = append(kept, w)
			continue
		}
		w.wake <- Turn[G]{Restart: true} // behind the head, or standing by: nothing else in its channel
	}
	clear(q.waiters[len(kept):])
	q.waiters = kept
	if len(q.waiters) == 0 {
		ln.deleteLocked(q)
		return
	}
	q.standByLocked()
}
