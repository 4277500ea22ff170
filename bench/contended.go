package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ContendedResult is one run of scenario 2: goroutines spread over several
// clients competing for one key, each holding it only to bump a counter.
//
// Hand-off latency runs from the moment the releasing goroutine is about to
// call its unlock (after its critical section, before the unlock call
// starts) to the moment the next holder's Lock call returns, on one
// monotonic clock in this process. It is counted only when the next holder
// is a different goroutine; a grant to the goroutine that released last is
// barging instead. A wait runs from the start of a Lock call to its return;
// a wait still in progress when the window closes counts as the time it has
// waited so far (censored), so a goroutine that never got the lock shows up.
type ContendedResult struct {
	RunInfo
	Target     string
	Clients    int
	Goroutines int
	Window     Window
	// Grants is the number of Lock calls that returned holding the lock
	// within the window.
	Grants int64
	// Followed counts the grants that followed a release (all but the
	// first); Barged those that went to the goroutine that released.
	Followed, Barged int64
	// Handoffs are the hand-off latencies, sorted.
	Handoffs []time.Duration
	// Waits are each goroutine's waits in the window, sorted, censored
	// ones included.
	Waits [][]time.Duration
	// Censored counts the waits still in progress at the window's end.
	Censored int
	// Stall is the longest a 1 ms sleep in this process woke late within
	// the window (probeStalls): how long the process, or the machine,
	// stood still whoever held the lock.
	Stall time.Duration
	// PerGoroutine counts each goroutine's grants in the window.
	PerGoroutine []int64
	// Overlaps counts grants that found another goroutine still inside its
	// critical section: a broken lock. It must be 0.
	Overlaps int64
	Errors   Errors
}

// AcqPerSec is acquisitions per second in the window.
func (r *ContendedResult) AcqPerSec() float64 { return float64(r.Grants) / r.Window.Elapsed.Seconds() }

// HandoffQuantile returns a quantile of hand-off latency.
func (r *ContendedResult) HandoffQuantile(q float64) time.Duration { return Quantile(r.Handoffs, q) }

// BargingShare is the share of grants that went straight back to the
// goroutine that had just released.
func (r *ContendedResult) BargingShare() float64 {
	if r.Followed == 0 {
		return 0
	}
	return float64(r.Barged) / float64(r.Followed)
}

// WorstP99 is the largest of the goroutines' own wait p99s.
func (r *ContendedResult) WorstP99() time.Duration {
	var w time.Duration
	for _, ws := range r.Waits {
		w = max(w, Quantile(ws, 0.99))
	}
	return w
}

// MaxWait is the longest wait of any goroutine, censored waits included.
func (r *ContendedResult) MaxWait() time.Duration {
	var w time.Duration
	for _, ws := range r.Waits {
		if len(ws) > 0 {
			w = max(w, ws[len(ws)-1])
		}
	}
	return w
}

// Starved counts goroutines that got no grant in the window.
func (r *ContendedResult) Starved() int {
	n := 0
	for _, g := range r.PerGoroutine {
		if g == 0 {
			n++
		}
	}
	return n
}

// AllWaits returns every goroutine's waits in one sorted slice.
func (r *ContendedResult) AllWaits() []time.Duration {
	var all []time.Duration
	for _, ws := range r.Waits {
		all = append(all, ws...)
	}
	return SortDurations(all)
}

// ContendedSpec sets the shape of scenario 2.
type ContendedSpec struct {
	Clients, Goroutines int
	Warm, Dur           time.Duration
}

// release is the last release seen: which goroutine and when (ns since the
// run's base time).
type release struct {
	gid int
	at  int64
	set bool
}

// contendedLocal is one goroutine's tally.
type contendedLocal struct {
	grants, followed, barged int64
	handoffs, waits          []time.Duration
	censored                 int
}

// contendedRun is the state the goroutines of one run share. Times are ns
// since base on the monotonic clock.
type contendedRun struct {
	base     time.Time
	t0, t1   atomic.Int64 // window bounds; 0 while unset
	holders  atomic.Int32
	overlaps atomic.Int64
	mu       sync.Mutex
	last     release
	work     atomic.Int64 // the critical section's shared state
	errs     errorLog
}

func (r *contendedRun) now() int64 { return int64(time.Since(r.base)) }

// RunContended runs scenario 2 for t on srv.
func RunContended(ctx context.Context, t Target, srv *Servers, spec ContendedSpec) (*ContendedResult, error) {
	res := &ContendedResult{Target: t.Name, Clients: spec.Clients, Goroutines: spec.Goroutines}
	if err := srv.Flush(ctx); err != nil {
		return res, err
	}
	var cnt Counter
	lockers, err := newLockers(t, srv, spec.Clients, &cnt)
	defer func() { _ = closeAll(lockers) }()
	if err != nil {
		return res, err
	}

	r := &contendedRun{base: time.Now()}
	locals := make([]contendedLocal, spec.Goroutines)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for g := 0; g < spec.Goroutines; g++ {
		wg.Add(1)
		go func(me int) {
			defer wg.Done()
			r.loop(runCtx, me, lockers[me%spec.Clients], &locals[me])
		}(g)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		res.Stall = probeStalls(runCtx, r.now, r.t0.Load, r.t1.Load, time.Sleep)
	}()
	res.Window, err = measure(ctx, srv, &cnt, spec.Warm, spec.Dur,
		func() { r.t0.Store(r.now()) },
		func() { r.t1.Store(r.now()) })
	if err != nil {
		r.t1.Store(r.now())
	}
	stop()
	wg.Wait()
	r.collect(res, locals)
	return res, err
}

// loop locks, runs the critical section and unlocks until ctx ends or a
// wait outlasts the window, tallying into st.
func (r *contendedRun) loop(ctx context.Context, me int, l Locker, st *contendedLocal) {
	const key = "bench:c"
	for ctx.Err() == nil {
		start := r.now()
		unlock, err := l.Lock(ctx, key)
		got := r.now()
		if end := r.t1.Load(); end > 0 && got > end {
			// The window closed during this wait: count what it had
			// waited by then.
			if start < end {
				st.waits = append(st.waits, time.Duration(end-start))
				st.censored++
			}
			if err == nil {
				_ = unlock(context.Background())
			}
			return
		}
		if err != nil {
			if ctx.Err() == nil {
				r.errs.add(fmt.Errorf("lock: %w", err))
				_ = sleep(ctx, time.Millisecond)
			}
			continue
		}
		r.granted(me, start, got, st)
		r.work.Add(1) // the critical section
		r.holders.Add(-1)
		rel := r.now()
		r.mu.Lock()
		r.last = release{gid: me, at: rel, set: true}
		r.mu.Unlock()
		if err := unlock(context.Background()); err != nil {
			r.errs.add(fmt.Errorf("unlock: %w", err))
		}
	}
}

// granted checks for an overlap and tallies a grant made at got (of a wait
// from start) if it falls in the window: a hand-off when the last release
// was another goroutine's, barging when it was this one's.
func (r *contendedRun) granted(me int, start, got int64, st *contendedLocal) {
	if r.holders.Add(1) != 1 {
		r.overlaps.Add(1)
	}
	r.mu.Lock()
	prev := r.last
	r.mu.Unlock()
	if begin := r.t0.Load(); begin == 0 || got < begin {
		return
	}
	st.grants++
	st.waits = append(st.waits, time.Duration(got-start))
	if !prev.set {
		return
	}
	st.followed++
	if prev.gid == me {
		st.barged++
	} else {
		st.handoffs = append(st.handoffs, time.Duration(got-prev.at))
	}
}

// collect adds the goroutines' tallies to res.
func (r *contendedRun) collect(res *ContendedResult, locals []contendedLocal) {
	res.Waits = make([][]time.Duration, len(locals))
	res.PerGoroutine = make([]int64, len(locals))
	for g, st := range locals {
		res.Grants += st.grants
		res.Followed += st.followed
		res.Barged += st.barged
		res.Handoffs = append(res.Handoffs, st.handoffs...)
		res.Waits[g] = SortDurations(st.waits)
		res.PerGoroutine[g] = st.grants
		res.Censored += st.censored
	}
	SortDurations(res.Handoffs)
	res.Overlaps = r.overlaps.Load()
	res.Errors = r.errs.result()
}
