package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Plan is what a report runs: how often and how long. DefaultPlan fits a
// full report into about 20 minutes on a two-core machine; Scale stretches
// every duration for steadier figures.
type Plan struct {
	Reps int

	UncontendedGoroutines []int
	UncontendedWarm       time.Duration
	UncontendedDur        time.Duration
	// UncontendedSlices cuts UncontendedDur into that many windows, which
	// the targets run in turns (RunUncontendedInterleaved).
	UncontendedSlices int

	Contended ContendedSpec
	Waiting   WaitingSpec
	Watchdog  WatchdogSpec
	// Election is scenario 6, run with the "dlock" target.
	Election ElectionSpec

	// RedlockNodes are the node counts of scenario 5, which runs scenario 1
	// at RedlockGoroutines and scenario 2 over that many redis-servers.
	RedlockNodes      []int
	RedlockGoroutines []int
	// RedlockLatency is the delay added in each direction by proxies in
	// front of the nodes for the runs that show the fan-out's parallelism:
	// scenario 1 at one goroutine over each of RedlockLatencyNodes nodes.
	// On loopback the servers and the client share this machine's cores,
	// so more nodes cost more CPU; over links whose latency dominates, as
	// between machines, a parallel fan-out costs about one round trip
	// whatever the number of nodes.
	RedlockLatency      time.Duration
	RedlockLatencyNodes []int
}

// DefaultPlan returns the plan `make bench` runs.
func DefaultPlan() Plan {
	return Plan{
		Reps:                  5,
		UncontendedGoroutines: []int{1, 8, 64},
		UncontendedWarm:       500 * time.Millisecond,
		UncontendedDur:        2 * time.Second,
		UncontendedSlices:     4,
		Contended:             ContendedSpec{Clients: 4, Goroutines: 16, Warm: time.Second, Dur: 5 * time.Second},
		Waiting:               WaitingSpec{Clients: 10, Waiters: 1000, Warm: 2 * time.Second, Dur: 4 * time.Second},
		Watchdog:              WatchdogSpec{Leases: 10000, TTL: 3 * time.Second, Warm: 3 * time.Second, Dur: 6 * time.Second},
		Election: ElectionSpec{Warm: 500 * time.Millisecond, Dur: 2 * time.Second, IdleDur: 12 * time.Second,
			Campaigners: 9, Observers: 10, HandoffCampaigners: 4, Handoffs: 500},
		RedlockNodes:        []int{3, 5},
		RedlockGoroutines:   []int{1, 8},
		RedlockLatency:      500 * time.Microsecond,
		RedlockLatencyNodes: []int{1, 5},
	}
}

// Scale multiplies every warm-up and window by f (the watchdog's TTL stays).
func (p Plan) Scale(f float64) Plan {
	s := func(d *time.Duration) { *d = time.Duration(float64(*d) * f) }
	s(&p.UncontendedWarm)
	s(&p.UncontendedDur)
	s(&p.Contended.Warm)
	s(&p.Contended.Dur)
	s(&p.Waiting.Warm)
	s(&p.Waiting.Dur)
	s(&p.Watchdog.Warm)
	s(&p.Watchdog.Dur)
	s(&p.Election.Warm)
	s(&p.Election.Dur)
	s(&p.Election.IdleDur)
	return p
}

// Results is everything one report run measured, every repetition of every
// run, in the order they ran.
type Results struct {
	Plan        Plan
	Machine     Machine
	Targets     []TargetInfo
	Started     time.Time
	Took        time.Duration
	Uncontended []UncontendedResult
	Contended   []*ContendedResult
	Waiting     []WaitingResult
	Watchdog    []WatchdogResult
	Election    []ElectionResult
	// GoBench is `go test -bench` output for BenchmarkUncontended, parsed.
	GoBench []GoBenchResult
	// Instructions are redis-server's instructions per pair, counted by
	// TestServerInstructions (-instructions-out) and read by TestReport.
	Instructions []InstructionsResult
}

// TargetInfo is a Target as the report describes it.
type TargetInfo struct {
	Name, Module, Version, Settings                 string
	Kind                                            Kind
	Tuned, Renews, Single, Multi, Primitive, Shares bool
}

// Info describes t for the report, at version of its module.
func (t Target) Info(version string) TargetInfo {
	return TargetInfo{Name: t.Name, Module: t.Module, Version: version, Settings: t.Settings,
		Kind: t.Kind, Tuned: t.Tuned, Renews: t.Renews, Single: t.Single, Multi: t.Multi, Primitive: t.Primitive, Shares: t.Shares}
}

// Suite runs a Plan on given servers.
type Suite struct {
	Plan    Plan
	Targets []Target
	// Single is the redis-server of scenarios 1 to 4; Nodes are at least
	// max(Plan.RedlockNodes) independent ones for scenario 5, and Delayed
	// at least max(Plan.RedlockLatencyNodes) proxies to them that add
	// Plan.RedlockLatency each way.
	Single  *Servers
	Nodes   []string
	Delayed []string
	// Log receives a line per run; may be nil.
	Log func(format string, args ...any)
}

func (s *Suite) logf(format string, args ...any) {
	if s.Log != nil {
		s.Log(format, args...)
	}
}

// rotate returns the order in which ts run in repetition (or turn) r:
// backwards in odd ones, then rotated by r. No target always runs first, and
// none always right after the same one (rotation alone kept every
// target's neighbours: redsync's one-goroutine run came right after the
// same dlock target's 64-goroutine run in every repetition).
func rotate[T any](ts []T, r int) []T {
	if len(ts) == 0 {
		return nil
	}
	order := slices.Clone(ts)
	if r%2 == 1 {
		slices.Reverse(order)
	}
	r %= len(order)
	return slices.Concat(order[r:], order[:r])
}

func filter(ts []Target, keep func(Target) bool) []Target {
	var out []Target
	for _, t := range ts {
		if keep(t) {
			out = append(out, t)
		}
	}
	return out
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Run runs every scenario Plan.Reps times, repetition by repetition, and
// returns every result; a run that fails is kept with its error.
func (s *Suite) Run(ctx context.Context) (*Results, error) {
	res := &Results{Plan: s.Plan, Started: time.Now()}
	single := filter(s.Targets, func(t Target) bool { return t.Single })
	untuned := filter(single, func(t Target) bool { return !t.Tuned })
	// Scenarios 2 and 3 keep goroutines waiting: only locks that exclude.
	excluding := filter(single, func(t Target) bool { return !t.Shares })
	// dlock's other primitives run in scenarios 1 to 3 only.
	libs := filter(single, func(t Target) bool { return !t.Primitive })
	renewing := filter(libs, func(t Target) bool { return t.Renews })
	multi := filter(s.Targets, func(t Target) bool { return t.Multi && !t.Primitive })
	multiUntuned := filter(multi, func(t Target) bool { return !t.Tuned })
	p := s.Plan
	for rep := 0; rep < p.Reps; rep++ {
		// Goroutine count by goroutine count: a target's run follows
		// another's at the same load, not the previous target's heaviest.
		for _, g := range p.UncontendedGoroutines {
			s.runUncontended(ctx, res, untuned, s.Single, g, RunInfo{Rep: rep, Nodes: 1}, "uncontended")
		}
		for _, t := range rotate(excluding, rep) {
			r, err := RunContended(ctx, t, s.Single, p.Contended)
			r.RunInfo = RunInfo{Rep: rep, Nodes: 1, Err: errString(err)}
			res.Contended = append(res.Contended, r)
			s.logf("rep %d contended   %-16s %8.0f acq/s hand-off p50 %v p99 %v barging %.0f%% max wait %v %s",
				rep+1, t.Name, r.AcqPerSec(), r.HandoffQuantile(0.5), r.HandoffQuantile(0.99), 100*r.BargingShare(), r.MaxWait(), r.Err)
		}
		for _, t := range rotate(excluding, rep) {
			r, err := RunWaiting(ctx, t, s.Single, p.Waiting)
			r.RunInfo = RunInfo{Rep: rep, Nodes: 1, Err: errString(err)}
			res.Waiting = append(res.Waiting, r)
			s.logf("rep %d waiting     %-16s %8.0f commands/s %s", rep+1, t.Name, r.CommandsPerSec(), r.Err)
		}
		for _, t := range rotate(renewing, rep) {
			r, err := RunWatchdog(ctx, t, s.Single, p.Watchdog)
			r.RunInfo = RunInfo{Rep: rep, Nodes: 1, Err: errString(err)}
			res.Watchdog = append(res.Watchdog, r)
			s.logf("rep %d watchdog    %-16s %6.1f round trips/period, CPU %v/period %s", rep+1, t.Name, r.RoundTripsPerPeriod(), r.CPUPerPeriod(), r.Err)
		}
		if slices.ContainsFunc(s.Targets, func(t Target) bool { return t.Name == headline }) {
			r, err := RunElection(ctx, s.Single, p.Election)
			r.RunInfo = RunInfo{Rep: rep, Nodes: 1, Err: errString(err)}
			res.Election = append(res.Election, r)
			s.logf("rep %d election    %.1f commands/cycle, %.1f commands/s idle, resign hand-off p50 %v %s",
				rep+1, r.CommandsPerCycle(), r.IdleCommandsPerSec(), r.HandoffQuantile(0.5), r.Err)
		}
		for _, n := range p.RedlockNodes {
			if n > len(s.Nodes) {
				return res, fmt.Errorf("bench: Redlock over %d nodes needs %d servers, have %d", n, n, len(s.Nodes))
			}
			srv := NewServers(s.Nodes[:n]...)
			for _, g := range p.RedlockGoroutines {
				s.runUncontended(ctx, res, multiUntuned, srv, g, RunInfo{Rep: rep, Nodes: n}, fmt.Sprintf("redlock n=%d uncontended", n))
			}
			for _, t := range rotate(multi, rep) {
				r, err := RunContended(ctx, t, srv, p.Contended)
				r.RunInfo = RunInfo{Rep: rep, Nodes: n, Err: errString(err)}
				res.Contended = append(res.Contended, r)
				s.logf("rep %d redlock n=%d contended %-16s %8.0f acq/s hand-off p50 %v barging %.0f%% %s",
					rep+1, n, t.Name, r.AcqPerSec(), r.HandoffQuantile(0.5), 100*r.BargingShare(), r.Err)
			}
			_ = srv.Close()
		}
		if err := s.runDelayedRedlock(ctx, res, rep, filter(multi, func(t Target) bool { return !t.Tuned })); err != nil {
			return res, err
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
	}
	res.Took = time.Since(res.Started)
	return res, nil
}

// runUncontended runs scenario 1 for ts in turns (RunUncontendedInterleaved)
// and adds their results, each with info, to res; a run that fails is kept
// with its error.
func (s *Suite) runUncontended(ctx context.Context, res *Results, ts []Target, srv *Servers, g int, info RunInfo, label string) {
	p := s.Plan
	rs, errs, err := RunUncontendedInterleaved(ctx, ts, srv, g, p.UncontendedWarm, p.UncontendedDur, p.UncontendedSlices, info.Rep)
	for i, r := range rs {
		r.RunInfo = info
		r.Err = errString(errors.Join(errs[i], err)) // err: every target's run failed
		res.Uncontended = append(res.Uncontended, r)
		s.logf("rep %d %s %-16s g=%-3d %9.0f pairs/s %s", info.Rep+1, label, r.Target, g, r.PairsPerSec(), r.Err)
	}
}

// runDelayedRedlock runs scenario 1 at one goroutine over each of
// Plan.RedlockLatencyNodes delayed nodes, for the targets ts.
func (s *Suite) runDelayedRedlock(ctx context.Context, res *Results, rep int, ts []Target) error {
	p := s.Plan
	if p.RedlockLatency <= 0 {
		return nil
	}
	for _, n := range p.RedlockLatencyNodes {
		if n > len(s.Delayed) {
			return fmt.Errorf("bench: Redlock over %d delayed nodes needs %d proxies, have %d", n, n, len(s.Delayed))
		}
		srv := NewServers(s.Delayed[:n]...)
		for _, t := range rotate(ts, rep) {
			r, err := RunUncontended(ctx, t, srv, 1, p.UncontendedWarm, p.UncontendedDur)
			r.RunInfo = RunInfo{Rep: rep, Nodes: n, Latency: 2 * p.RedlockLatency, Err: errString(err)}
			res.Uncontended = append(res.Uncontended, r)
			s.logf("rep %d redlock n=%d over %v round trips: %-16s %9.0f pairs/s %s", rep+1, n, 2*p.RedlockLatency, t.Name, r.PairsPerSec(), r.Err)
		}
		_ = srv.Close()
	}
	return nil
}
