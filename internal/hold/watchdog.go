package hold

import (
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
)

// Watchdog is a Client's one scheduler for every lease it holds: it renews
// leases that auto-renew and declares a lease lost when its local validity
// deadline passes without a successful renewal. It is one goroutine for the
// whole Client, not one per lease, and it renews every lease that is due at
// about the same time in one pipelined batch (see docs/holding.md). Its
// mutex guards the state of every lease it watches.
type Watchdog struct {
	// drv runs the pipelined renewals of BatchRenewer holders.
	drv driver.Driver

	mu       sync.Mutex
	leases   leaseHeap // by next event: renewal or deadline
	nextWake time.Time // when the loop will wake up by itself
	// idleLead is how far ahead of its tracking the newest lease's first
	// event was; an idle loop sleeps half of it (see step).
	idleLead time.Duration
	started  bool
	closed   bool
	// lossSeq is the last id Lease.OnLoss gave, for any lease of the
	// Watchdog (a counter per lease would grow every Lease).
	lossSeq LossID

	wake    chan struct{}
	pokes   atomic.Int64 // wake-ups sent to the loop, for tests
	stop    chan struct{}
	done    chan struct{}
	batches sync.WaitGroup
	// ctx is the parent of every renewal's context; Close cancels it, so
	// a renewal waiting on a silent server does not hold Close up until
	// the lease's validity deadline.
	ctx    context.Context
	cancel context.CancelFunc
}

// NewWatchdog returns a Watchdog whose batches run on drv (nil when every
// holder renews by itself). Its goroutine starts with the first lease;
// Close stops it.
func NewWatchdog(drv driver.Driver) *Watchdog {
	ctx, cancel := context.WithCancel(context.Background())
	return &Watchdog{
		drv:    drv,
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		ctx:    ctx,
		cancel: cancel,
	}
}

// track starts watching a new lease.
func (w *Watchdog) track(l *Lease) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return errs.ErrClosed
	}
	l.eventAt = l.nextEventLocked()
	w.leases.push(l)
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
func (w *Watchdog) poke() {
	w.pokes.Add(1)
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// nextEventLocked is when the Watchdog must next look at the lease.
func (l *Lease) nextEventLocked() time.Time {
	if l.renewing == nil && !l.nextRenew.IsZero() && l.nextRenew.Before(l.validUntil) {
		return l.nextRenew
	}
	return l.validUntil
}

// rescheduleLocked repositions a tracked lease after its times changed.
func (w *Watchdog) rescheduleLocked(l *Lease) {
	if l.heapIndex < 0 {
		return
	}
	l.eventAt = l.nextEventLocked()
	heap.Fix(&w.leases, l.heapIndex)
}

func (w *Watchdog) run() {
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
func (w *Watchdog) step(now time.Time) time.Duration {
	var (
		batch []*Lease
		lost  []*Lease
		funcs [][]func(error)
	)
	w.mu.Lock()
	for len(w.leases) > 0 {
		l := w.leases[0]
		if !l.validUntil.After(now) {
			funcs = append(funcs, l.loseLocked(l.deadlineReasonLocked()))
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
		w.leases.push(l)
	}
	sleep := w.sleepLocked(now)
	if len(batch) > 0 {
		w.batches.Add(1)
		go w.renew(batch)
	}
	w.mu.Unlock()
	for i, l := range lost {
		l.runLoss(funcs[i])
	}
	return sleep
}

// sleepLocked is how long the loop sleeps after a step at now.
func (w *Watchdog) sleepLocked(now time.Time) time.Duration {
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
	return sleep
}

// Close stops the loop, ends the renewals in flight and declares every
// lease still held lost.
func (w *Watchdog) Close() {
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
		funcs = append(funcs, l.loseLocked("the client was closed, so nothing renews it"))
		lost = append(lost, l)
	}
	w.mu.Unlock()
	for i, l := range lost {
		l.runLoss(funcs[i])
	}
}

// Counts is what a Watchdog holds, for tests that check it all goes.
type Counts struct {
	Leases    int   // leases watched
	Slots     int   // capacity of the heap of leases
	LossFuncs int   // loss callbacks on the leases watched
	Pokes     int64 // wake-ups sent to the loop so far
}

// Counts returns what w holds now.
func (w *Watchdog) Counts() Counts {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := Counts{Leases: len(w.leases), Slots: cap(w.leases), Pokes: w.pokes.Load()}
	for _, l := range w.leases {
		c.LossFuncs += len(l.lossFuncs)
	}
	return c
}

// leaseHeap orders leases by their next event.
type leaseHeap []*Lease

func (h *leaseHeap) push(l *Lease)     { heap.Push(h, l) }
func (h *leaseHeap) remove(i int)      { heap.Remove(h, i) }
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
