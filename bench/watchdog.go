package bench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// WatchdogResult is one run of scenario 4: one client holding many leases
// that its library renews by itself.
type WatchdogResult struct {
	RunInfo
	Target string
	Leases int
	TTL    time.Duration
	// Period is the library's renewal period for this TTL.
	Period time.Duration
	Window Window
	// CPU is the process's user+system CPU time in the window (the client:
	// redis-server is another process).
	CPU time.Duration
	// Acquire is how long taking all the leases took.
	Acquire time.Duration
	// Lost counts leases whose Unlock failed at the end: they had been lost.
	Lost   int64
	Errors Errors
}

// Periods is the number of renewal periods in the window.
func (r WatchdogResult) Periods() float64 {
	return r.Window.Elapsed.Seconds() / r.Period.Seconds()
}

// RoundTripsPerPeriod is the client's round trips per renewal period.
func (r WatchdogResult) RoundTripsPerPeriod() float64 {
	return float64(r.Window.Client.RoundTrips) / r.Periods()
}

// CommandsPerPeriod is the client's commands per renewal period.
func (r WatchdogResult) CommandsPerPeriod() float64 {
	return float64(r.Window.Client.Commands) / r.Periods()
}

// RenewalsPerLease is how often each lease was renewed per period, from the
// commands sent (one renewal command per lease, or per key for libraries
// that renew several keys per lock).
func (r WatchdogResult) RenewalsPerLease() float64 {
	return float64(r.Window.Client.Commands) / float64(r.Leases) / r.Periods()
}

// RoundTripsPerPass is how many round trips renewing every lease once took:
// round trips ÷ (renewal commands ÷ leases). Unlike round trips per period
// it does not depend on where the window's edges fall between two batches.
func (r WatchdogResult) RoundTripsPerPass() float64 {
	if r.Window.Client.Commands == 0 {
		return math.NaN()
	}
	return float64(r.Window.Client.RoundTrips) * float64(r.Leases) / float64(r.Window.Client.Commands)
}

// CPUPerPeriod is the client's CPU time per renewal period.
func (r WatchdogResult) CPUPerPeriod() time.Duration {
	return time.Duration(float64(r.CPU) / r.Periods())
}

// WatchdogSpec sets the shape of scenario 4.
type WatchdogSpec struct {
	Leases int
	TTL    time.Duration
	// Warm is how long to wait after the leases are taken, so renewals
	// settle into their steady rhythm; Dur is the window.
	Warm, Dur time.Duration
}

// RunWatchdog runs scenario 4 for t (which must renew) on srv.
func RunWatchdog(ctx context.Context, t Target, srv *Servers, spec WatchdogSpec) (WatchdogResult, error) {
	res := WatchdogResult{Target: t.Name, Leases: spec.Leases, TTL: spec.TTL,
		Period: time.Duration(float64(spec.TTL) * t.RenewEvery)}
	if err := srv.Flush(ctx); err != nil {
		return res, err
	}
	var cnt Counter
	l, err := t.New(Config{Addrs: srv.Addrs, Counter: &cnt, TTL: spec.TTL})
	if err != nil {
		return res, err
	}
	defer l.Close()

	holdCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	unlocks := make([]Unlock, spec.Leases)
	var (
		next, lost atomic.Int64
		errs       errorLog
		wg         sync.WaitGroup
	)
	const workers = 32
	begin := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(spec.Leases); i = next.Add(1) - 1 {
				u, err := l.TryLock(holdCtx, fmt.Sprintf("bench:wd:%d", i))
				if err != nil {
					errs.add(err)
					continue
				}
				unlocks[i] = u
			}
		}()
	}
	wg.Wait()
	res.Acquire = time.Since(begin)

	res.Window, err = measure(ctx, srv, &cnt, spec.Warm, spec.Dur, nil, nil)
	res.CPU = res.Window.ClientCPU

	next.Store(0)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(spec.Leases); i = next.Add(1) - 1 {
				if u := unlocks[i]; u != nil {
					if err := u(context.Background()); err != nil {
						lost.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	res.Lost = lost.Load()
	res.Errors = errs.result()
	return res, err
}
