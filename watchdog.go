package dlock

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
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
