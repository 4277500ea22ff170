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

// RunContended runs scenario 2 for t on srv.
func RunContended(ctx context.Context, t Target, srv *Servers, spec ContendedSpec) (*ContendedResult, error) {
	res := &ContendedResult{Target: t.Name, Clients: spec.Clients, Goroutines: spec.Goroutines}
	if err := srv.Flush(ctx); err != nil {
		return res, err
	}
	var cnt Counter
	lockers := make([]Locker, spec.Clients)
	defer func() { _ = closeAll(lockers) }()
	for i := range lockers {
		l, err := t.New(Config{Addrs: srv.Addrs, Counter: &cnt})
		if err != nil {
			return res, err
		}
		lockers[i] = l
	}

	const key = "bench:c"
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	var (
		t0, t1   atomic.Int64 // window bounds; 0 while unset
		holders  atomic.Int32
		overlaps atomic.Int64
		mu       sync.Mutex
		last     release
		work     atomic.Int64 // the critical section's shared state
		errs     errorLog
		wg       sync.WaitGroup
	)
	type local struct {
		grants, followed, barged int64
		handoffs, waits          []time.Duration
		censored                 int
	}
	locals := make([]local, spec.Goroutines)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	for g := 0; g < spec.Goroutines; g++ {
		wg.Add(1)
		go func(me int, l Locker, st *local) {
			defer wg.Done()
			for runCtx.Err() == nil {
				start := now()
				unlock, err := l.Lock(runCtx, key)
				got := now()
				end := t1.Load()
				if end > 0 && got > end {
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
					if runCtx.Err() == nil {
						errs.add(fmt.Errorf("lock: %w", err))
						_ = sleep(runCtx, time.Millisecond)
					}
					continue
				}
				if holders.Add(1) != 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				prev := last
				mu.Unlock()
				if begin := t0.Load(); begin > 0 && got >= begin {
					st.grants++
					st.waits = append(st.waits, time.Duration(got-start))
					if prev.set {
						st.followed++
						if prev.gid == me {
							st.barged++
						} else {
							st.handoffs = append(st.handoffs, time.Duration(got-prev.at))
						}
					}
				}
				work.Add(1) // the critical section
				holders.Add(-1)
				rel := now()
				mu.Lock()
				last = release{gid: me, at: rel, set: true}
				mu.Unlock()
				if err := unlock(context.Background()); err != nil {
					errs.add(fmt.Errorf("unlock: %w", err))
				}
			}
		}(g, lockers[g%spec.Clients], &locals[g])
	}
	var err error
	res.Window, err = measure(ctx, srv, &cnt, spec.Warm, spec.Dur,
		func() { t0.Store(now()) },
		func() { t1.Store(now()) })
	if err != nil {
		t1.Store(now())
	}
	stop()
	wg.Wait()

	res.Waits = make([][]time.Duration, spec.Goroutines)
	res.PerGoroutine = make([]int64, spec.Goroutines)
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
	res.Overlaps = overlaps.Load()
	res.Errors = errs.result()
	return res, err
}
