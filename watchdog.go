package dlock

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
)

// watchdog is the Client's one scheduler for every lease it holds: it renews
// leases that auto-renew and declares a lease lost when its local validity
// deadline passes without a successful renewal. It is one goroutine for the
// whole Client, not one per lease, and it renews every lease that is due at
// about the same time in one pipelined batch (see docs/design.md).
type watchdog struct {
	// drv runs the pipelined renewals of batchRenewer holders.
	drv driver.Driver

	mu       sync.Mutex
	leases   leaseHeap // by next event: renewal or deadline
	nextWake time.Time // when the loop will wake up by itself
	// idleLead is how far ahead of its tracking the newest lease's first
	// event was; an idle loop sleeps half of it (see step).
	idleLead time.Duration
	started  bool
	closed   bool
	// lossSeq is the last id Lease.onLoss gave, for any lease of the
	// Client (a counter per lease would grow every Lease).
	lossSeq lossID

	wake    chan struct{}
	pokes   atomic.Int64 // wake-ups sent to the loop, for tests
	stop    chan struct{}
	done    chan struct{}
	batches sync.WaitGroup
	// ctx is the parent of every renewal's context; close cancels it, so
	// a renewal waiting on a silent server does not hold close up until
	// the lease's validity deadline.
	ctx    context.Context
	cancel context.CancelFunc
}

func newWatchdog(drv driver.Driver) *watchdog {
	ctx, cancel := context.WithCancel(context.Background())
	return &watchdog{
		drv:    drv,
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		ctx:    ctx,
		cancel: cancel,
	}
}

// track starts watching a new lease.
func (w *watchdog) track(l *Lease) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	l.eventAt = l.nextEventLocked()
	heap.Push(&w.leases, l)
	w.idleLead = time.Until(l.eventAt)
	// Wake the loop only if it would sleep past this lease's event: most
	// new leases are due after ones already watched (or just released),
	// and a wake-up per acquisition costs the scheduler more than the
	// whole bookkeeping.
	early := w.started && l.eventAt.Before(w.nextWake)
	if !w.started {
		w.started = true
		go w.run()
	}
	w.mu.Unlock()
	if early {
		w.poke()
	}
	return nil
}

// poke makes the loop recompute its next wake-up.
func (w *watchdog) poke() {
	w.pokes.Add(1)
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// nextEventLocked is when the watchdog must next look at the lease.
func (l *Lease) nextEventLocked() time.Time {
	if l.renewing == nil && !l.nextRenew.IsZero() && l.nextRenew.Before(l.validUntil) {
		return l.nextRenew
	}
	return l.validUntil
}

// rescheduleLocked repositions a tracked lease after its times changed.
func (w *watchdog) rescheduleLocked(l *Lease) {
	if l.heapIndex < 0 {
		return
	}
	l.eventAt = l.nextEventLocked()
	heap.Fix(&w.leases, l.heapIndex)
}

func (w *watchdog) run() {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := w.step(time.Now())
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
		select {
		case <-timer.C:
		case <-w.wake:
		case <-w.stop:
			return
		}
	}
}

// step declares overdue leases lost, starts a renewal batch for the leases
// that are due, and returns how long to sleep.
func (w *watchdog) step(now time.Time) time.Duration {
	var (
		batch []*Lease
		lost  []*Lease
		funcs [][]func(error)
	)
	w.mu.Lock()
	for len(w.leases) > 0 {
		l := w.leases[0]
		if !l.validUntil.After(now) {
			funcs = append(funcs, w.loseLocked(l, l.deadlineReasonLocked()))
			lost = append(lost, l)
			continue
		}
		// Renew what is due, and with it what would be due within half a
		// renewal period: leases acquired at different times converge to
		// one batch per period.
		if l.renewing != nil || l.nextRenew.IsZero() || l.nextRenew.After(now.Add(l.ttl/6)) {
			break
		}
		heap.Pop(&w.leases)
		l.renewing = make(chan struct{})
		batch = append(batch, l)
	}
	for _, l := range batch {
		l.eventAt = l.nextEventLocked()
		heap.Push(&w.leases, l)
	}
	sleep := time.Hour
	switch {
	case len(w.leases) > 0:
		sleep = w.leases[0].eventAt.Sub(now)
	case w.idleLead > 0:
		// Nothing to watch, but leases came and went since the last look:
		// sleep half as long as the newest one had to its first event, so
		// that the next few leases are due after this wake-up and track
		// need not wake the loop for them. Under a stream of short holds
		// that saves a goroutine wake-up (two futex calls) per acquisition;
		// an idle Client wakes once more, then sleeps for an hour.
		sleep = w.idleLead / 2
		w.idleLead = 0
	}
	w.nextWake = now.Add(sleep)
	if len(batch) > 0 {
		w.batches.Add(1)
		go w.renew(batch)
	}
	w.mu.Unlock()
	for i, l := range lost {
		runLossFuncs(funcs[i], l)
	}
	return sleep
}

// deadlineReasonLocked says why a lease reached its deadline.
func (l *Lease) deadlineReasonLocked() string {
	switch {
	case l.capped:
		return "the maximum hold time (WithMaxHold) was reached"
	case !l.autoRenew:
		return "its TTL elapsed (auto-renew is off)"
	case l.lastErr != nil:
		return fmt.Sprintf("no renewal succeeded before the validity deadline (last error: %v)", l.lastErr)
	}
	return "no renewal succeeded before the validity deadline"
}

// renew sends one batch of renewals in a single pipelined round trip and
// applies the outcomes. Its context ends at the earliest deadline in the
// batch: past that, the answer no longer matters.
func (w *watchdog) renew(batch []*Lease) {
	defer w.batches.Done()
	start := time.Now()
	perLease := make([][]*driver.Call, len(batch))
	var calls []*driver.Call
	var solo []int // leases whose holders renew by themselves
	pxs := make([]time.Duration, len(batch))
	shorten := make([]bool, len(batch))
	results := make([]error, len(batch))
	deadline := start.Add(time.Hour)
	w.mu.Lock()
	for i, l := range batch {
		pxs[i] = l.cappedLocked(l.ttl, start)
		shorten[i] = l.shortensLocked(start, pxs[i])
		if b, ok := l.h.(batchRenewer); ok {
			perLease[i] = b.renewCalls(l.owner, pxs[i], shorten[i])
			l.cfg.askAck(perLease[i]...) // WithReplicaAck: see replicaack.go
			calls = append(calls, perLease[i]...)
		} else {
			solo = append(solo, i)
		}
		if l.validUntil.Before(deadline) {
			deadline = l.validUntil
		}
	}
	w.mu.Unlock()

	ctx, cancel := context.WithDeadline(w.ctx, deadline)
	var wg sync.WaitGroup
	for _, i := range solo {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i] = batch[i].h.renew(ctx, batch[i].owner, pxs[i], shorten[i])
		}(i)
	}
	if len(calls) > 0 {
		w.drv.Run(ctx, calls...)
	}
	wg.Wait()
	cancel()
	for i, l := range batch {
		if b, ok := l.h.(batchRenewer); ok {
			results[i] = b.renewResult(perLease[i])
			if results[i] == nil {
				// Re-armed on the master but not on enough replicas: not
				// a renewal the lease may count on (retried below).
				results[i] = ackErr(perLease[i]...)
			}
		}
	}

	now := time.Now()
	var (
		lost     []*Lease
		funcs    [][]func(error)
		observed []func() // Observer calls and log records, made after w.mu is released
	)
	w.mu.Lock()
	for i, l := range batch {
		if o := l.cfg.observer; o != nil && l.state == leaseHeld && l.err == nil {
			info, err := l.info(), results[i]
			observed = append(observed, func() { o.Renewed(info, err) })
		}
		close(l.renewing)
		l.renewing = nil
		if l.state != leaseHeld || l.err != nil {
			continue // unlocked or lost meanwhile
		}
		err := results[i]
		switch {
		case err == nil:
			l.lastErr = nil
			l.applyValidityLocked(start, pxs[i])
		case errors.Is(err, ErrNotHeld):
			funcs = append(funcs, w.loseLocked(l, "a renewal found the key gone or held by another owner"))
			lost = append(lost, l)
			continue
		default:
			l.lastErr = err
			l.nextRenew = now.Add(renewRetryDelay(l.ttl))
			logger, name, kind, token, validFor := l.cfg.logger, l.Name(), l.kind, l.token, l.validUntil.Sub(now)
			observed = append(observed, func() {
				logger.Warn("dlock: renewal failed; retrying", slog.String("lock", name), slog.String("kind", string(kind)),
					slog.Int64("token", token), slog.Duration("valid_for", validFor), slog.Any("error", err))
			})
		}
		w.rescheduleLocked(l)
	}
	w.mu.Unlock()
	for _, f := range observed {
		f()
	}
	for i, l := range lost {
		runLossFuncs(funcs[i], l)
	}
	w.poke()
}

// renewRetryDelay spaces renewal retries after a failure: often enough to
// get several tries in before the deadline, rarely enough not to hammer a
// struggling server.
func renewRetryDelay(ttl time.Duration) time.Duration {
	d := ttl / 20
	if d < 5*time.Millisecond {
		d = 5 * time.Millisecond
	}
	if d > time.Second {
		d = time.Second
	}
	return d
}

// loseLocked marks a lease lost, stops watching it and closes Done. It
// returns the loss callbacks for the caller to run after unlocking w.mu.
func (w *watchdog) loseLocked(l *Lease, reason string) []func(error) {
	if l.err != nil || l.state == leaseReleased {
		return nil
	}
	l.err = fmt.Errorf("%w: %q: %s", ErrLockLost, l.Name(), reason)
	if l.heapIndex >= 0 {
		heap.Remove(&w.leases, l.heapIndex)
	}
	l.closeDoneLocked()
	funcs := make([]func(error), 0, len(l.lossFuncs)+2)
	for _, lf := range l.lossFuncs {
		funcs = append(funcs, lf.f)
	}
	l.lossFuncs = nil
	if o := l.cfg.observer; o != nil {
		info := l.info()
		funcs = append(funcs, func(err error) { o.Lost(info, err) })
	}
	// Logged with the callbacks, after w.mu is released: a slow handler
	// must not stall every lease of the Client.
	logger, name, kind, token := l.cfg.logger, l.Name(), l.kind, l.token
	funcs = append(funcs, func(error) {
		logger.Warn("dlock: lock lost", slog.String("lock", name), slog.String("kind", string(kind)),
			slog.Int64("token", token), slog.String("reason", reason))
	})
	return funcs
}

// lose declares a lease lost and runs its loss callbacks.
func (w *watchdog) lose(l *Lease, reason string) {
	w.mu.Lock()
	funcs := w.loseLocked(l, reason)
	w.mu.Unlock()
	runLossFuncs(funcs, l)
}

// retire ends a lease whose lock was released by other means (the last
// hold of a reentrant lock, released through a nested lease): it stops
// watching it and closes Done, sending nothing.
func (w *watchdog) retire(l *Lease) {
	if w.beginUnlock(context.Background(), l, true) == nil {
		w.endUnlock(l, nil)
	}
}

func (l *Lease) closeDoneLocked() {
	if !l.doneClosed {
		l.doneClosed = true
		if l.done != nil {
			close(l.done)
		}
	}
}

// beginUnlock stops watching a lease and waits for its renewal in flight, so
// that the release that follows is the last command for this lease. When
// ctx ends first (the release timeout of an Unlock), the error matches
// ctx's: the renewal was sent to a server that has not answered since, and
// the release would fare no better. With keep (a Downgrade, a reentrant
// owner's renewal) the lease then goes back to the watchdog, unchanged;
// without it (an Unlock) it ends lost, unrenewed, so that the lock expires
// within its TTL unless Unlock is called again (renewed on, it stayed held
// for as long as the process lived when the holder did not retry).
func (w *watchdog) beginUnlock(ctx context.Context, l *Lease, keep bool) error {
	w.mu.Lock()
	switch l.state {
	case leaseUnlocking:
		w.mu.Unlock()
		return fmt.Errorf("%w: Unlock is already in progress", ErrNotHeld)
	case leaseReleased:
		err := l.err
		w.mu.Unlock()
		if err == errDowngraded {
			return err
		}
		return fmt.Errorf("%w: the lease has already ended (unlocked or released)", ErrNotHeld)
	}
	l.state = leaseUnlocking
	if l.heapIndex >= 0 {
		heap.Remove(&w.leases, l.heapIndex)
	}
	renewing := l.renewing
	w.mu.Unlock()
	if renewing != nil {
		select {
		case <-renewing:
		case <-ctx.Done():
			err := &renewalPendingError{err: ctx.Err()}
			if keep {
				w.resume(l)
			} else {
				w.endUnlock(l, err)
			}
			return err
		}
	}
	return nil
}

// renewalPendingError is a release not sent because a renewal sent before
// it had not returned within the release timeout.
type renewalPendingError struct{ err error }

func (e *renewalPendingError) Error() string {
	return "a renewal sent earlier has not returned within the release timeout, so the release was not sent: " +
		"Redis is not answering; the lock expires within its TTL, or call Unlock again: " + e.err.Error()
}

func (e *renewalPendingError) Unwrap() error { return e.err }

// isRenewalPending reports whether err is, or wraps, a renewalPendingError.
// (A pointer declared for errors.As escapes to the heap wherever it is
// declared: in a function of its own, only a failed call pays for it.)
func isRenewalPending(err error) bool {
	var pending *renewalPendingError
	return errors.As(err, &pending)
}

// resume hands a lease that beginUnlock took from the watchdog back to it,
// unchanged, when the release or Downgrade it was paused for did not
// happen.
func (w *watchdog) resume(l *Lease) {
	w.mu.Lock()
	l.state = leaseHeld
	funcs := w.watchAgainLocked(l)
	w.mu.Unlock()
	runLossFuncs(funcs, l)
	w.poke()
}

// watchAgainLocked puts a held lease that Unlock or Downgrade took from the
// watchdog back under its watch; after close, which declared every lease it
// watched lost, it declares this one lost too, since nothing will renew it
// or close its Done at its deadline. It returns the loss callbacks to run
// after w.mu is released. Nested holds of a reentrant lock are never
// watched: their parent is.
func (w *watchdog) watchAgainLocked(l *Lease) []func(error) {
	switch {
	case l.err != nil || l.parent != nil || l.heapIndex >= 0:
		return nil
	case w.closed:
		return w.loseLocked(l, "the client was closed, so nothing renews it")
	}
	l.eventAt = l.nextEventLocked()
	heap.Push(&w.leases, l)
	return nil
}

// endUnlock records the outcome of the release. A failed release ends the
// lease as lost: its request may still reach Redis (a reply lost or late, a
// Redlock node that did not answer in time) and free the lock at any moment,
// so the lease can no longer say that the lock is its own. Unlock can still
// be called again, to make sure the lock is released.
func (w *watchdog) endUnlock(l *Lease, err error) {
	var funcs []func(error)
	w.mu.Lock()
	switch {
	case err == nil, errs.ReleasedDespiteConflict(err):
		// A release that freed the lock ends the lease, even when it
		// reports a foreign key beside it (Unlock returns that error).
		l.state = leaseReleased
		l.closeDoneLocked()
	case errors.Is(err, ErrNotHeld):
		funcs = w.loseLocked(l, "it expired or was taken over before Unlock")
		l.state = leaseReleased
	default:
		// Before, the lease went back to being held until its deadline,
		// while the release could still land: another owner could then
		// take the lock under a lease that said it was held.
		l.state = leaseHeld // for the Unlock called again
		l.lostInEnd = l.lostInEnd || l.err == nil
		reason := fmt.Sprintf("releasing it failed (%v), and the release may still reach Redis", err)
		var pending *renewalPendingError
		if errors.As(err, &pending) {
			reason = fmt.Sprintf("Unlock gave up (%v): nothing renews the lock any more, and it expires within its TTL unless Unlock is called again", pending.err)
		}
		funcs = w.loseLocked(l, reason)
	}
	w.mu.Unlock()
	runLossFuncs(funcs, l)
}

// close stops the loop, ends the renewals in flight and declares every
// lease still held lost.
func (w *watchdog) close() {
	w.mu.Lock()
	w.closed = true
	started := w.started
	w.mu.Unlock()
	if started {
		close(w.stop)
		<-w.done
	}
	w.cancel()
	w.batches.Wait()
	var (
		lost  []*Lease
		funcs [][]func(error)
	)
	w.mu.Lock()
	for len(w.leases) > 0 {
		l := w.leases[0]
		funcs = append(funcs, w.loseLocked(l, "the client was closed, so nothing renews it"))
		lost = append(lost, l)
	}
	w.mu.Unlock()
	for i, l := range lost {
		runLossFuncs(funcs[i], l)
	}
}

// leaseHeap orders leases by their next event.
type leaseHeap []*Lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].eventAt.Before(h[j].eventAt) }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex = i
	h[j].heapIndex = j
}
func (h *leaseHeap) Push(x any) {
	l := x.(*Lease)
	l.heapIndex = len(*h)
	*h = append(*h, l)
}
func (h *leaseHeap) Pop() any {
	old := *h
	n := len(old)
	l := old[n-1]
	old[n-1] = nil
	l.heapIndex = -1
	*h = old[:n-1]
	return l
}
