package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// ChartFile is the chart's file name, next to benchmarks.md.
const ChartFile = "benchmarks-contended.png"

// headline is the dlock variant the targets are judged on: its defaults.
const headline = "dlock"

// WriteReport writes benchmarks.md and its chart into dir.
func WriteReport(res *Results, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	v := &view{res: res}
	handoffs, waits := v.chartSeries(1)
	if err := WriteContendedChart(filepath.Join(dir, ChartFile),
		fmt.Sprintf("(%d goroutines, %d clients, one key)", res.Plan.Contended.Goroutines, res.Plan.Contended.Clients),
		handoffs, waits); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "benchmarks.md"), []byte(v.markdown()), 0o644)
}

// view answers the report's questions about a Results.
type view struct {
	res *Results
	b   strings.Builder
}

func (v *view) p(format string, args ...any) { fmt.Fprintf(&v.b, format, args...) }

func (v *view) reps() int { return v.res.Plan.Reps }

func (v *view) target(name string) (TargetInfo, bool) {
	for _, t := range v.res.Targets {
		if t.Name == name {
			return t, true
		}
	}
	return TargetInfo{}, false
}

// names returns the targets that keep says, in report order, leaving out
// dlock's other primitives (Target.Primitive): the scenarios' tables and the
// verdicts compare libraries, and the primitives have a section of their
// own (primitives).
func (v *view) names(keep func(TargetInfo) bool) []string {
	return v.namesOf(func(t TargetInfo) bool { return !t.Primitive && keep(t) })
}

// namesOf returns the targets that keep says, in report order, primitives
// included.
func (v *view) namesOf(keep func(TargetInfo) bool) []string {
	var out []string
	for _, t := range v.res.Targets {
		if keep(t) {
			out = append(out, t.Name)
		}
	}
	return out
}

func nan() float64 { return math.NaN() }

// ref is a target that a table divides the others' figures by, run by run,
// in columns labelled with label ("×floor").
type ref struct{ label, name string }

// refs returns the references among floor (labelled "floor") and mutex
// (labelled "Mutex") that were part of the run.
func (v *view) refs(floor, mutex string) []ref {
	var out []ref
	if _, ok := v.target(floor); ok {
		out = append(out, ref{"floor", floor})
	}
	if _, ok := v.target(mutex); ok {
		out = append(out, ref{"Mutex", mutex})
	}
	return out
}

// floorRef is the floor as the only reference, or none when floor is "".
func floorRef(floor string) []ref {
	if floor == "" {
		return nil
	}
	return []ref{{"floor", floor}}
}

// perRep returns one value per repetition, NaN where the run is missing or
// failed.
func (v *view) perRep(f func(rep int) float64) []float64 {
	out := make([]float64, v.reps())
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// unc is name's scenario 1 run at g goroutines over nodes servers in
// repetition rep, over delayed links (Plan.RedlockLatency) or not.
func (v *view) unc(name string, g, nodes int, delayed bool, rep int) *UncontendedResult {
	for i := range v.res.Uncontended {
		r := &v.res.Uncontended[i]
		if r.Target == name && r.Goroutines == g && r.Nodes == nodes && (r.Latency > 0) == delayed && r.Rep == rep && r.Err == "" {
			return r
		}
	}
	return nil
}

// pairRate is name's pairs/s at g goroutines over nodes servers, per
// repetition.
func (v *view) pairRate(name string, g, nodes int, delayed bool) []float64 {
	return v.perRep(func(rep int) float64 {
		if r := v.unc(name, g, nodes, delayed, rep); r != nil && r.Pairs > 0 {
			return r.PairsPerSec()
		}
		return nan()
	})
}

func (v *view) uncRate(name string, g, nodes int) []float64 { return v.pairRate(name, g, nodes, false) }

// delayedRate is name's pairs/s at one goroutine over nodes delayed nodes,
// per repetition.
func (v *view) delayedRate(name string, nodes int) []float64 { return v.pairRate(name, 1, nodes, true) }

func (v *view) con(name string, nodes, rep int) *ContendedResult {
	for _, r := range v.res.Contended {
		if r.Target == name && r.Nodes == nodes && r.Rep == rep && r.Err == "" {
			return r
		}
	}
	return nil
}

func (v *view) conFig(name string, nodes int, f func(*ContendedResult) float64) []float64 {
	return v.perRep(func(rep int) float64 {
		if r := v.con(name, nodes, rep); r != nil && r.Grants > 0 {
			return f(r)
		}
		return nan()
	})
}

func (v *view) wait(name string, rep int) *WaitingResult {
	for i := range v.res.Waiting {
		r := &v.res.Waiting[i]
		if r.Target == name && r.Rep == rep && r.Err == "" {
			return r
		}
	}
	return nil
}

func (v *view) waitFig(name string, f func(*WaitingResult) float64) []float64 {
	return v.perRep(func(rep int) float64 {
		if r := v.wait(name, rep); r != nil {
			return f(r)
		}
		return nan()
	})
}

func (v *view) wd(name string, rep int) *WatchdogResult {
	for i := range v.res.Watchdog {
		r := &v.res.Watchdog[i]
		if r.Target == name && r.Rep == rep && r.Err == "" {
			return r
		}
	}
	return nil
}

func (v *view) wdFig(name string, f func(*WatchdogResult) float64) []float64 {
	return v.perRep(func(rep int) float64 {
		if r := v.wd(name, rep); r != nil {
			return f(r)
		}
		return nan()
	})
}

// bestOf returns, run by run, the largest value among names.
func bestOf(series map[string][]float64, names []string, reps int) []float64 {
	out := make([]float64, reps)
	for i := range out {
		out[i] = nan()
		for _, n := range names {
			if x := series[n][i]; !math.IsNaN(x) && (math.IsNaN(out[i]) || x > out[i]) {
				out[i] = x
			}
		}
	}
	return out
}

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

func rate(s Summary) string  { return fmtSummary(s, thousands) }
func ratio(s Summary) string { return fmtSummary(s, fmtRatioValue) }
func msS(s Summary) string   { return fmtSummary(s, fmtMs) }

func durMs(d time.Duration) float64 { return ms(d) }

func roundTrips(v float64) string {
	if v >= 100 {
		return thousands(v)
	}
	return fmtFloat(2)(v)
}

// --- the document ---

func (v *view) markdown() string {
	r := v.res
	v.p("# Benchmarks\n\n")
	v.p("Generated by `make bench` (bench/, TestReport) on %s; do not edit by hand. ", r.Started.UTC().Format("2006-01-02 15:04 MST"))
	v.p("Every figure is the **median of %d runs, with the range (min–max) in parentheses**. ", r.Plan.Reps)
	v.p("Ratios are taken run by run, against the floor or the peer measured in the same repetition on the same redis-server, and then summarized the same way: ")
	v.p("this machine is shared and noisy, so absolute figures drift from run to run while ratios hold better. ")
	v.p("The run took %s.\n\n", r.Took.Round(time.Second))
	v.p("Speed is measured here, never asserted in tests. To run it again: `make bench` (about 30 minutes with its default 5 runs; `BENCHFLAGS='-reps 3'` takes about 18, with wider ranges); ")
	v.p("for steadier figures still, `make bench BENCHFLAGS='-scale 2'`.\n\n")

	v.machine()
	v.targets()
	v.headline()
	v.uncontended()
	v.contended()
	v.waiting()
	v.watchdog()
	v.redlock()
	v.election()
	v.primitives()
	v.levers()
	v.method()
	v.problems()
	return v.b.String()
}

// levers points to the hand-written account of what moved which figure
// (bench/levers.md), which keeps its history there rather than in the
// report.
func (v *view) levers() {
	v.p("## Levers: what moved which figure\n\n")
	v.p("What each performance change bought, with the runs that measured it, is kept\n")
	v.p("with its history in [bench/levers.md](../bench/levers.md).\n\n")
}

func (v *view) machine() {
	m := v.res.Machine
	v.p("## Machine and versions\n\n")
	t := &table{head: []string{"", ""}}
	t.add("CPUs (nproc)", fmt.Sprint(m.CPUs))
	t.add("CPU", m.CPUModel)
	t.add("memory", fmt.Sprintf("%.1f GiB", m.MemoryGiB))
	t.add("kernel", m.Kernel+" "+m.OSArch)
	t.add("Go", m.Go)
	t.add("redis-server", m.Redis+" (one process for scenarios 1–4, independent ones for Redlock; all on loopback, started by internal/redistest)")
	commit := m.Commit
	if m.Dirty {
		commit += " with uncommitted changes to dlock's code in the working tree"
	}
	t.add("dlock", "this repository at "+commit)
	mods := make([]string, 0, len(m.Modules))
	for path := range m.Modules {
		mods = append(mods, path)
	}
	sort.Strings(mods)
	for _, path := range []string{modGoredis, modRedsync, modRedislock, modRueidis} {
		if ver, ok := m.Modules[path]; ok {
			t.add(path, ver)
		}
	}
	p := v.res.Plan
	if m.Load != "" {
		t.add("load average (1, 5, 15 min)", m.Load)
	}
	t.add("plan", fmt.Sprintf("%d repetitions; uncontended %v warm-up + %v in %d turns; contended %v + %v; waiting %v + %v; watchdog %v + %v",
		p.Reps, p.UncontendedWarm, p.UncontendedDur, max(p.UncontendedSlices, 1), p.Contended.Warm, p.Contended.Dur, p.Waiting.Warm, p.Waiting.Dur, p.Watchdog.Warm, p.Watchdog.Dur))
	v.p("%s\n", t)
	v.p("Every library runs on the same go-redis version (the bench module's, which redsync's requirement sets), so dlock is measured on it too.\n\n")
}

func (v *view) targets() {
	v.p("## Libraries and settings\n\n")
	t := &table{head: []string{"target", "library", "settings"}}
	for _, ti := range v.res.Targets {
		lib := ti.Module
		if ti.Kind == KindDlock {
			lib = "dlock (this tree)"
		} else if ti.Version != "" {
			lib += " " + ti.Version
		}
		t.add("**"+ti.Name+"**", lib, ti.Settings)
	}
	v.p("%s\n", t)
	v.p("The `-tight` variants use the retry interval with the lowest worst-goroutine wait p99 in a sweep from 0.5 to 20 ms of the contended scenario " +
		"(`go test -run TestSweepRetry ./ -args -sweep` in bench/); longer intervals buy acquisitions per second by letting the releasing goroutine re-take the lock, " +
		"which the default variants show. Retry settings only matter under contention, so the tight variants run in scenarios 2 and 3 only. " +
		"Only dlock and rueidislock renew held locks by themselves; `dlock-norenew` turns dlock's renewal off to compare like with like.\n\n")
	if prims := v.namesOf(func(t TargetInfo) bool { return t.Primitive }); len(prims) > 0 {
		v.p("%s are dlock's other primitives (and its Mutex given options per call); they run in scenarios 1 to 3 only and are shown in a section of their own, against the Mutex.",
			"`"+strings.Join(prims, "`, `")+"`")
		if shared := v.namesOf(func(t TargetInfo) bool { return t.Shares }); len(shared) > 0 {
			v.p(" %s do not exclude (a read lock, one permit of several), so they run in scenario 1 only.", "`"+strings.Join(shared, "`, `")+"`")
		}
		v.p("\n\n")
	}
	v.p("rueidislock's defaults track its own keys without NOLOOP, so a renewal (PEXPIREAT) invalidates the renewing client's own tracked key, which makes it renew again: " +
		"after its first renewal period a held lock is renewed continuously, and every client waiting for it is woken each time. " +
		"Scenarios 3 and 4 show the cost (PEXPIREAT per second with a single holder, renewals per lease per period). " +
		"Its NoLoopTracking option (Redis ≥ 7.0.5) avoids this; the issue asks for its defaults, so they are kept.\n\n")
}

// --- headline ---

type verdict struct {
	target, measured, status string
}

func (v *view) headline() {
	v.p("## dlock against its targets\n\n")
	v.p("Judged on `%s` (its defaults). \"Missed\" says by how much.\n\n", headline)
	t := &table{head: []string{"target", "measured", "status"}}
	for _, vd := range v.verdicts() {
		t.add(vd.target, vd.measured, vd.status)
	}
	v.p("%s\n", t)
}

func atLeast(got, want float64, unit string) string {
	if math.IsNaN(got) {
		return "not measured"
	}
	if got >= want {
		return "met"
	}
	return fmt.Sprintf("**missed** by %s (%.0f%% short)", unit, 100*(want-got)/want)
}

func atMost(got, want float64, unit string) string {
	if math.IsNaN(got) {
		return "not measured"
	}
	if got <= want {
		return "met"
	}
	return fmt.Sprintf("**missed** by %s (%.1f× the limit)", unit, got/want)
}

func (v *view) verdicts() []verdict {
	var out []verdict
	floorNames := v.names(func(t TargetInfo) bool { return t.Kind == KindFloor && t.Single })
	peers := v.names(func(t TargetInfo) bool { return t.Kind == KindPeer && t.Single && !t.Tuned })
	want := map[int]float64{1: 0.9, 8: 1.0, 64: 1.2}
	for _, g := range v.res.Plan.UncontendedGoroutines {
		w, ok := want[g]
		if !ok || len(floorNames) == 0 {
			continue
		}
		s := Summarize(Ratios(v.uncRate(headline, g, 1), v.uncRate(floorNames[0], g, 1)))
		out = append(out, verdict{fmt.Sprintf("uncontended, %d goroutine(s): ≥ %.1f× the floor", g, w), ratio(s),
			atLeast(s.Median, w, fmt.Sprintf("%.2f×", w-s.Median))})
	}
	for _, g := range v.res.Plan.UncontendedGoroutines {
		worst, worstName := math.Inf(1), ""
		var parts []string
		for _, p := range peers {
			s := Summarize(Ratios(v.uncRate(headline, g, 1), v.uncRate(p, g, 1)))
			parts = append(parts, fmt.Sprintf("%s %s", p, fmtRatioValue(s.Median)))
			if s.Median < worst {
				worst, worstName = s.Median, p
			}
		}
		if worstName == "" {
			continue
		}
		status := "met"
		if worst <= 1 {
			status = fmt.Sprintf("**missed**: %s is ahead (dlock at %.2f× of it)", worstName, worst)
		}
		out = append(out, verdict{fmt.Sprintf("uncontended, %d goroutine(s): ahead of every peer", g), strings.Join(parts, ", "), status})
	}
	if len(v.res.GoBench) > 0 && len(floorNames) > 0 {
		var parts []string
		status := "met"
		for _, g := range v.res.Plan.UncontendedGoroutines {
			d := v.goBench(fmt.Sprintf("Uncontended/%s/g=%d", headline, g))
			f := v.goBench(fmt.Sprintf("Uncontended/%s/g=%d", floorNames[0], g))
			if d == nil || f == nil {
				continue
			}
			parts = append(parts, fmt.Sprintf("g=%d: %.0f vs %.0f", g, d.allocs.Median, f.allocs.Median))
			if d.allocs.Median > f.allocs.Median && status == "met" {
				status = fmt.Sprintf("**missed** by %.0f allocations (%.1f× the floor's)", d.allocs.Median-f.allocs.Median, d.allocs.Median/f.allocs.Median)
			}
		}
		if len(parts) > 0 {
			out = append(out, verdict{"allocations per pair ≤ the floor's (go test -bench)", strings.Join(parts, "; "), status})
		}
	}

	// Contended.
	cpeers := v.names(func(t TargetInfo) bool { return t.Kind == KindPeer && t.Single })
	acq := map[string][]float64{}
	for _, n := range append(cpeers, headline) {
		acq[n] = v.conFig(n, 1, func(r *ContendedResult) float64 { return r.AcqPerSec() })
	}
	best := Summarize(Ratios(acq[headline], bestOf(acq, cpeers, v.reps())))
	out = append(out, verdict{"contended: acquisitions/s ≥ the best peer's", fmt.Sprintf("%s of the best peer in each run (%s acq/s)", ratio(best), rate(Summarize(acq[headline]))),
		atLeast(best.Median, 1, fmt.Sprintf("%.2f×", 1-best.Median))})
	var fair []string
	for _, n := range cpeers {
		if Summarize(v.conFig(n, 1, (*ContendedResult).BargingShare)).Median <= 0.10 {
			fair = append(fair, n)
		}
	}
	if len(fair) > 0 {
		s := Summarize(Ratios(acq[headline], bestOf(acq, fair, v.reps())))
		out = append(out, verdict{"(for scale) against the best peer that hands off fairly (barging ≤ 10%: " + strings.Join(fair, ", ") + ")", ratio(s), "–"})
	}
	p50 := Summarize(v.conFig(headline, 1, func(r *ContendedResult) float64 { return durMs(r.HandoffQuantile(0.5)) }))
	p99 := Summarize(v.conFig(headline, 1, func(r *ContendedResult) float64 { return durMs(r.HandoffQuantile(0.99)) }))
	out = append(out, verdict{"contended: hand-off p50 ≤ 0.1 ms", msS(p50), atMost(p50.Median, 0.1, fmtMs(p50.Median-0.1))})
	out = append(out, verdict{"contended: hand-off p99 ≤ 0.5 ms", msS(p99), atMost(p99.Median, 0.5, fmtMs(p99.Median-0.5))})
	maxWait := Summarize(v.conFig(headline, 1, func(r *ContendedResult) float64 { return durMs(r.MaxWait()) }))
	out = append(out, verdict{"contended: no goroutine waits > 20 ms", fmt.Sprintf("longest wait %s; worst of all runs %s", msS(maxWait), fmtMs(maxWait.Max)),
		atMost(maxWait.Max, 20, fmtMs(maxWait.Max-20))})
	barge := Summarize(v.conFig(headline, 1, (*ContendedResult).BargingShare))
	out = append(out, verdict{"contended: barging ≤ 10%", fmtSummary(barge, fmtPercent), atMost(barge.Median, 0.10, fmtPercent(barge.Median-0.10))})
	cpa := Summarize(v.conFig(headline, 1, func(r *ContendedResult) float64 { return float64(r.Window.Client.Commands) / float64(r.Grants) }))
	spa := Summarize(v.conFig(headline, 1, func(r *ContendedResult) float64 { return float64(r.Window.Server.Total()) / float64(r.Grants) }))
	out = append(out, verdict{"contended: ≤ 3 commands per acquisition", fmt.Sprintf("%s sent by the clients (%s executed by Redis, scripts' inner calls included)",
		fmtSummary(cpa, fmtFloat(2)), fmtSummary(spa, fmtFloat(1))), atMost(cpa.Median, 3, fmtFloat(2)(cpa.Median-3))})

	// Waiting.
	w := v.res.Plan.Waiting
	limit := float64(w.Waiters) / 100
	wr := Summarize(v.waitFig(headline, func(r *WaitingResult) float64 { return float64(r.Window.Client.Commands) / r.Window.Elapsed.Seconds() }))
	ws := Summarize(v.waitFig(headline, (*WaitingResult).CommandsPerSec))
	out = append(out, verdict{fmt.Sprintf("waiting: near-zero commands/s while %s goroutines wait (read here as ≤ %s/s, one per 100 waiters per second)", thousands(float64(w.Waiters)), thousands(limit)),
		fmt.Sprintf("%s commands/s sent (%s executed by Redis)", rate(wr), rate(ws)), atMost(wr.Median, limit, thousands(wr.Median-limit)+"/s")})

	// Watchdog.
	rt := Summarize(v.wdFig(headline, (*WatchdogResult).RoundTripsPerPass))
	per := Summarize(v.wdFig(headline, (*WatchdogResult).RenewalsPerLease))
	out = append(out, verdict{fmt.Sprintf("watchdog: %s leases renewed with one round trip per node per period", thousands(float64(v.res.Plan.Watchdog.Leases))),
		fmt.Sprintf("%s round trips to renew every lease once; each lease renewed %s times per period", fmtSummary(rt, fmtFloat(2)), fmtSummary(per, fmtFloat(2))),
		atMost(rt.Median, 1.05, fmtFloat(2)(rt.Median-1)+" round trips")})
	return append(out, v.redlockVerdicts()...)
}

// redlockVerdicts judges dlock's Redlock: ahead of the Redlock peers over
// every node count, and a five-node lock+unlock within 1.5× a one-node
// one when the network sets the pace.
func (v *view) redlockVerdicts() []verdict {
	var out []verdict
	p := v.res.Plan
	dl := v.names(func(t TargetInfo) bool { return t.Multi && t.Kind == KindDlock })
	peers := v.names(func(t TargetInfo) bool { return t.Multi && t.Kind == KindPeer && !t.Tuned })
	if len(dl) == 0 {
		return nil
	}
	d := dl[0]
	for _, n := range p.RedlockNodes {
		for _, pe := range peers {
			var parts []string
			worst := math.Inf(1)
			for _, g := range p.RedlockGoroutines {
				s := Summarize(Ratios(v.uncRate(d, g, n), v.uncRate(pe, g, n)))
				parts = append(parts, fmt.Sprintf("uncontended g=%d %s", g, fmtRatioValue(s.Median)))
				worst = math.Min(worst, s.Median)
			}
			c := Summarize(Ratios(v.conFig(d, n, (*ContendedResult).AcqPerSec), v.conFig(pe, n, (*ContendedResult).AcqPerSec)))
			parts = append(parts, "contended "+fmtRatioValue(c.Median))
			worst = math.Min(worst, c.Median)
			status := "met"
			if math.IsNaN(worst) {
				status = "not measured"
			} else if worst <= 1 {
				status = fmt.Sprintf("**missed**: %s is ahead somewhere (dlock at %.2f× of it)", pe, worst)
			}
			out = append(out, verdict{fmt.Sprintf("Redlock over %d nodes: ahead of %s", n, pe), strings.Join(parts, ", "), status})
		}
	}
	if ln := p.RedlockLatencyNodes; p.RedlockLatency > 0 && len(ln) >= 2 {
		lo, hi := ln[0], ln[len(ln)-1]
		s := Summarize(Ratios(v.delayedRate(d, lo), v.delayedRate(d, hi)))
		measured := fmt.Sprintf("%s over links with a %s round trip (%d nodes against %d)", ratio(s), fmtMs(durMs(2*p.RedlockLatency)), hi, lo)
		if loop := Summarize(Ratios(v.uncRate(headline, 1, 1), v.uncRate(d, 1, hi))); !math.IsNaN(loop.Median) {
			measured += fmt.Sprintf("; on loopback, where the servers share the client's two cores, %s a Mutex's on one node", fmtRatioValue(loop.Median))
		}
		out = append(out, verdict{fmt.Sprintf("Redlock, %d nodes: a lock+unlock ≤ 1.5× a single node's (parallel fan-out)", hi), measured,
			atMost(s.Median, 1.5, fmtRatioValue(s.Median-1.5))})
	}
	return out
}

// --- scenario 1 ---

type goBenchSummary struct {
	ns, bytes, allocs Summary
}

func (v *view) goBench(name string) *goBenchSummary {
	var ns, by, al []float64
	for _, g := range v.res.GoBench {
		if g.Name == name {
			ns = append(ns, g.NsPerOp)
			by = append(by, g.BytesPerOp)
			al = append(al, g.AllocsPerOp)
		}
	}
	if len(ns) == 0 {
		return nil
	}
	return &goBenchSummary{Summarize(ns), Summarize(by), Summarize(al)}
}

// uncontendedTable shows names' pairs/s at each of gs goroutines over nodes
// servers, each followed by its ratio to every one of refs.
func (v *view) uncontendedTable(nodes int, names []string, gs []int, refs []ref) *table {
	head := []string{"target"}
	for _, g := range gs {
		head = append(head, fmt.Sprintf("g=%d pairs/s", g))
		for _, rf := range refs {
			head = append(head, fmt.Sprintf("g=%d ×%s", g, rf.label))
		}
	}
	t := &table{head: head}
	for _, n := range names {
		row := []string{n}
		for _, g := range gs {
			row = append(row, rate(Summarize(v.uncRate(n, g, nodes))))
			for _, rf := range refs {
				row = append(row, ratio(Summarize(Ratios(v.uncRate(n, g, nodes), v.uncRate(rf.name, g, nodes)))))
			}
		}
		t.add(row...)
	}
	return t
}

// uncontendedCommands shows what each of names' pairs cost on one server,
// summed over every goroutine count and run.
func (v *view) uncontendedCommands(names []string) *table {
	return commandsTable("pair", names, func(n string) (Window, float64) {
		var w Window
		var pairs float64
		for _, r := range v.res.Uncontended {
			if r.Target == n && r.Nodes == 1 && r.Latency == 0 && r.Err == "" {
				addWindow(&w, r.Window)
				pairs += float64(r.Pairs)
			}
		}
		return w, pairs
	})
}

// goBenchTable shows BenchmarkUncontended's figures for names at each of
// gs goroutines, with each name's speed and allocations against every one
// of refs. Names without figures are left out.
func (v *view) goBenchTable(names []string, gs []int, refs []ref) *table {
	head := []string{"benchmark", "ns/pair", "B/pair", "allocs/pair"}
	for _, rf := range refs {
		head = append(head, "speed ×"+rf.label, "allocs ÷ "+rf.label+"'s")
	}
	t := &table{head: head}
	for _, n := range names {
		for _, g := range gs {
			name := fmt.Sprintf("Uncontended/%s/g=%d", n, g)
			s := v.goBench(name)
			if s == nil {
				continue
			}
			row := []string{name, fmtSummary(s.ns, thousands), thousands(s.bytes.Median), thousands(s.allocs.Median)}
			for _, rf := range refs {
				speed, allocs := "–", "–"
				if f := v.goBench(fmt.Sprintf("Uncontended/%s/g=%d", rf.name, g)); f != nil {
					speed = fmtRatioValue(f.ns.Median / s.ns.Median)
					allocs = fmtRatioValue(s.allocs.Median / f.allocs.Median)
				}
				row = append(row, speed, allocs)
			}
			t.add(row...)
		}
	}
	return t
}

// commandsTable shows what each target sent and Redis executed per unit,
// summed over every run in the selection.
func commandsTable(unit string, names []string, pick func(name string) (Window, float64)) *table {
	t := &table{head: []string{"target", "commands sent / " + unit, "round trips / " + unit, "client CPU / " + unit, "Redis CPU / " + unit,
		"Redis executed / " + unit, "what Redis executed, per " + unit}}
	for _, n := range names {
		w, per := pick(n)
		if per <= 0 {
			t.add(n, "–", "–", "–", "–", "–", "–")
			continue
		}
		t.add(n, fmtFloat(2)(float64(w.Client.Commands)/per), fmtFloat(2)(float64(w.Client.RoundTrips)/per),
			fmtMs(ms(w.ClientCPU)/per), fmtMs(ms(w.ServerCPU)/per),
			fmtFloat(2)(float64(w.Server.Total())/per), FormatBreakdown(w.Server.Per(per), 2))
	}
	return t
}

func addWindow(a *Window, b Window) {
	a.Elapsed += b.Elapsed
	a.ClientCPU += b.ClientCPU
	a.ServerCPU += b.ServerCPU
	a.Client.Commands += b.Client.Commands
	a.Client.RoundTrips += b.Client.RoundTrips
	if a.Server == nil {
		a.Server = CommandStats{}
	}
	for k, x := range b.Server {
		a.Server[k] += x
	}
}

func (v *view) uncontended() {
	p := v.res.Plan
	v.p("## 1. Uncontended: lock+unlock pairs per second\n\n")
	v.p("Goroutines share one client; each locks and unlocks its own key in a loop with the waiting `Lock` call (which finds the key free). ")
	v.p("Each target warms up for %v, then pairs are counted for %v", p.UncontendedWarm, p.UncontendedDur)
	if n := p.UncontendedSlices; n > 1 {
		v.p(", in %d windows of %v: the targets take turns (each window after a %v warm-up of its own), in an order that changes from turn to turn, so that all of them meet the machine's drift alike", n, p.UncontendedDur/time.Duration(n), TurnWarm(p.UncontendedWarm))
	}
	v.p(".\n\n")
	names := v.names(func(t TargetInfo) bool { return t.Single && !t.Tuned })
	floor := v.floorName()
	v.p("%s\n", v.uncontendedTable(1, names, p.UncontendedGoroutines, floorRef(floor)))

	dl := v.names(func(t TargetInfo) bool { return t.Kind == KindDlock && t.Single })
	peers := v.names(func(t TargetInfo) bool { return t.Kind == KindPeer && t.Single && !t.Tuned })
	head := []string{"ratio"}
	for _, g := range p.UncontendedGoroutines {
		head = append(head, fmt.Sprintf("g=%d", g))
	}
	t := &table{head: head}
	for _, d := range dl {
		for _, pe := range peers {
			row := []string{d + " ÷ " + pe}
			for _, g := range p.UncontendedGoroutines {
				row = append(row, ratio(Summarize(Ratios(v.uncRate(d, g, 1), v.uncRate(pe, g, 1)))))
			}
			t.add(row...)
		}
	}
	v.p("dlock against each peer (above 1× means dlock is faster):\n\n%s\n", t)

	v.p("What each pair costs, summed over every goroutine count and run: commands and round trips counted in the client (a go-redis hook or a rueidis wrapper); CPU time of this process (getrusage) and of redis-server (INFO cpu) divided by pairs; what Redis executed from INFO commandstats, which also counts the commands scripts run inside:\n\n")
	v.p("%s\n", v.uncontendedCommands(names))

	if len(v.res.GoBench) == 0 {
		v.p("(`go test -bench` figures were not part of this run.)\n\n")
		return
	}
	v.p("`go test -bench BenchmarkUncontended -benchmem` in bench/ (ns per pair is wall time divided by pairs, across all goroutines; medians over its runs: `make bench` runs every target once per pass, in `BENCH_COUNT` passes (3 by default), so that a target's runs are spread over the whole time rather than made in a row):\n\n")
	var rows []string
	deadlineRows := false
	for _, n := range names {
		rows = append(rows, n)
		if n == DeadlineVariantOf {
			rows = append(rows, n+DeadlineSuffix)
			for _, g := range p.UncontendedGoroutines {
				deadlineRows = deadlineRows || v.goBench(fmt.Sprintf("Uncontended/%s/g=%d", n+DeadlineSuffix, g)) != nil
			}
		}
	}
	v.p("%s\n", v.goBenchTable(rows, p.UncontendedGoroutines, []ref{{"floor", floor}}))
	if deadlineRows {
		v.p("%s%s is %s with a deadline (an hour away) on Lock's context, on the same go-redis client with its default options. "+
			"Without `ContextTimeoutEnabled` go-redis does not end a call at its context's deadline, so dlock hands each such call to another goroutine "+
			"and returns at the deadline whatever the server does (docs/design.md, \"Contexts and round trips\"); the floor and the peers ignore the deadline. "+
			"With `ContextTimeoutEnabled: true` go-redis ends the call itself and a call sent alone runs in the caller again; a batched one still waits on copies. "+
			"Every other figure in this report gives Lock a context that can be cancelled but has no deadline, as a request's.\n\n",
			DeadlineVariantOf, DeadlineSuffix, DeadlineVariantOf)
	}
}

func (v *view) floorName() string {
	if f := v.names(func(t TargetInfo) bool { return t.Kind == KindFloor }); len(f) > 0 {
		return f[0]
	}
	return ""
}

// --- scenario 2 ---

// contendedTable shows names' figures in scenario 2 over nodes servers,
// with their acquisitions per second against every one of refs.
func (v *view) contendedTable(nodes int, names []string, refs []ref) *table {
	head := []string{"target", "acq/s"}
	for _, rf := range refs {
		head = append(head, "×"+rf.label)
	}
	head = append(head, "hand-off p50", "hand-off p99", "hand-offs counted", "worst goroutine's wait p99", "longest wait", "goroutines starved", "barging", "commands sent / acq")
	t := &table{head: head}
	for _, n := range names {
		acq := v.conFig(n, nodes, func(r *ContendedResult) float64 { return r.AcqPerSec() })
		row := []string{n, rate(Summarize(acq))}
		for _, rf := range refs {
			row = append(row, ratio(Summarize(Ratios(acq, v.conFig(rf.name, nodes, func(r *ContendedResult) float64 { return r.AcqPerSec() })))))
		}
		row = append(row,
			msS(Summarize(v.conFig(n, nodes, func(r *ContendedResult) float64 { return durMs(r.HandoffQuantile(0.5)) }))),
			msS(Summarize(v.conFig(n, nodes, func(r *ContendedResult) float64 { return durMs(r.HandoffQuantile(0.99)) }))),
			rate(Summarize(v.conFig(n, nodes, func(r *ContendedResult) float64 { return float64(len(r.Handoffs)) }))),
			msS(Summarize(v.conFig(n, nodes, func(r *ContendedResult) float64 { return durMs(r.WorstP99()) }))),
			msS(Summarize(v.conFig(n, nodes, func(r *ContendedResult) float64 { return durMs(r.MaxWait()) }))),
			fmtSummary(Summarize(v.conFig(n, nodes, func(r *ContendedResult) float64 { return float64(r.Starved()) })), fmtFloat(0)),
			fmtSummary(Summarize(v.conFig(n, nodes, (*ContendedResult).BargingShare)), fmtPercent),
			fmtSummary(Summarize(v.conFig(n, nodes, func(r *ContendedResult) float64 { return float64(r.Window.Client.Commands) / float64(r.Grants) })), fmtFloat(2)),
		)
		t.add(row...)
	}
	return t
}

func (v *view) contendedRatios(nodes int, dl, others []string) *table {
	t := &table{head: []string{"acq/s ratio", "median (range)"}}
	for _, d := range dl {
		for _, o := range others {
			t.add(d+" ÷ "+o, ratio(Summarize(Ratios(
				v.conFig(d, nodes, func(r *ContendedResult) float64 { return r.AcqPerSec() }),
				v.conFig(o, nodes, func(r *ContendedResult) float64 { return r.AcqPerSec() })))))
		}
	}
	return t
}

func (v *view) contendedCommands(nodes int, names []string) *table {
	return commandsTable("acquisition", names, func(n string) (Window, float64) {
		var w Window
		var grants float64
		for _, r := range v.res.Contended {
			if r.Target == n && r.Nodes == nodes && r.Err == "" {
				addWindow(&w, r.Window)
				grants += float64(r.Grants)
			}
		}
		return w, grants
	})
}

func (v *view) contended() {
	c := v.res.Plan.Contended
	v.p("## 2. Contended: %d goroutines on %d clients, one key\n\n", c.Goroutines, c.Clients)
	v.p("Each goroutine loops: `Lock`, bump a shared counter (the critical section), unlock. %v warm-up, then %v measured. ", c.Warm, c.Dur)
	v.p("**Hand-off** runs from the moment the releasing goroutine is about to call unlock to the moment a *different* goroutine's `Lock` returns; ")
	v.p("a grant to the goroutine that released last counts as **barging** instead. **Waits** run from a `Lock` call to its return; a wait still going when the window closes counts as long as it had waited, so a goroutine that never got the lock shows up as a long wait and as **starved**.\n\n")
	names := v.names(func(t TargetInfo) bool { return t.Single })
	v.p("%s\n", v.contendedTable(1, names, floorRef(v.floorName())))
	v.p("![Hand-off latency and wait distributions per library](%s)\n\n", ChartFile)
	v.p("The chart pools every run's samples; a line that ends further right has a longer tail, and its lowest point is the single slowest sample. Dashed grey lines mark the targets (hand-off p50 0.1 ms and p99 0.5 ms, waits 20 ms).\n\n")
	dl := v.names(func(t TargetInfo) bool { return t.Kind == KindDlock && t.Single })
	others := v.names(func(t TargetInfo) bool { return t.Kind != KindDlock && t.Single })
	v.p("%s\n", v.contendedRatios(1, dl, others))
	v.p("Commands per acquisition, summed over the runs:\n\n%s\n", v.contendedCommands(1, names))
}

func (v *view) chartSeries(nodes int) (handoffs, waits []Series) {
	for _, n := range v.names(func(t TargetInfo) bool { return t.Single }) {
		var h, w []time.Duration
		for _, r := range v.res.Contended {
			if r.Target == n && r.Nodes == nodes && r.Err == "" {
				h = append(h, r.Handoffs...)
				w = append(w, r.AllWaits()...)
			}
		}
		t, _ := v.target(n)
		st := seriesStyle(n, t.Tuned || (t.Kind == KindDlock && n != headline), n == headline)
		handoffs = append(handoffs, Series{Name: n, Samples: SortDurations(h), Style: st})
		waits = append(waits, Series{Name: n, Samples: SortDurations(w), Style: st})
	}
	return handoffs, waits
}

// --- scenario 3 ---

func (v *view) waiting() {
	w := v.res.Plan.Waiting
	v.p("## 3. Waiting load: %s goroutines on %d clients blocked on one held lock\n\n", thousands(float64(w.Waiters)), w.Clients)
	v.p("Another client takes the lock and holds it; the waiters call `Lock`. After %v, what the waiters' clients send and what Redis executes are counted for %v. ", w.Warm, w.Dur)
	v.p("Redis's counts include the holder's renewals, if its library renews.\n\n")
	v.p("%s\n", v.waitingTable(v.names(func(t TargetInfo) bool { return t.Single })))
}

// waitingTable shows names' figures in scenario 3: what the waiters'
// clients sent and what Redis executed per second, and the grants that
// should not have happened.
func (v *view) waitingTable(names []string) *table {
	w := v.res.Plan.Waiting
	t := &table{head: []string{"target", "commands sent/s", "per waiter per second", "round trips/s", "Redis executed/s", "what Redis executed, per second", "grants while held"}}
	for _, n := range names {
		sent := Summarize(v.waitFig(n, func(r *WaitingResult) float64 { return float64(r.Window.Client.Commands) / r.Window.Elapsed.Seconds() }))
		var win Window
		for _, r := range v.res.Waiting {
			if r.Target == n && r.Err == "" {
				addWindow(&win, r.Window)
			}
		}
		breakdown := "–"
		if win.Elapsed > 0 {
			breakdown = FormatBreakdown(win.Server.Per(win.Elapsed.Seconds()), 0)
		}
		t.add(n, rate(sent), fmtFloat(3)(sent.Median/float64(w.Waiters)),
			rate(Summarize(v.waitFig(n, (*WaitingResult).RoundTripsPerSec))),
			rate(Summarize(v.waitFig(n, (*WaitingResult).CommandsPerSec))),
			breakdown,
			fmtFloat(0)(sum(v.waitFig(n, func(r *WaitingResult) float64 { return float64(r.Grants) }))))
	}
	return t
}

// --- scenario 4 ---

func (v *view) watchdog() {
	w := v.res.Plan.Watchdog
	v.p("## 4. Watchdog scale: %s leases held by one client with auto-renew\n\n", thousands(float64(w.Leases)))
	v.p("TTL %v (rueidislock: key validity %v). The leases are taken from 32 goroutines, then after %v the client's round trips, commands and CPU time (getrusage, user+system, the whole test process; redis-server is another process) are counted for %v. ", w.TTL, w.TTL, w.Warm, w.Dur)
	v.p("A period is the library's renewal interval: TTL/3 for dlock, TTL/2 for rueidislock, which renews each of a lock's three keys on its own.\n\n")
	t := &table{head: []string{"target", "renewal period", "renewals per lease per period", "round trips to renew every lease once",
		"round trips / period", "commands sent / period", "Redis executed / period", "client CPU / period", "CPU, share of one core", "leases lost", "taking them took"}}
	for _, n := range v.names(func(t TargetInfo) bool { return t.Renews && t.Single }) {
		period := "–"
		for _, r := range v.res.Watchdog {
			if r.Target == n {
				period = r.Period.String()
				break
			}
		}
		t.add(n, period,
			fmtSummary(Summarize(v.wdFig(n, (*WatchdogResult).RenewalsPerLease)), fmtFloat(2)),
			fmtSummary(Summarize(v.wdFig(n, (*WatchdogResult).RoundTripsPerPass)), roundTrips),
			fmtSummary(Summarize(v.wdFig(n, (*WatchdogResult).RoundTripsPerPeriod)), roundTrips),
			rate(Summarize(v.wdFig(n, (*WatchdogResult).CommandsPerPeriod))),
			rate(Summarize(v.wdFig(n, func(r *WatchdogResult) float64 { return float64(r.Window.Server.Total()) / r.Periods() }))),
			msS(Summarize(v.wdFig(n, func(r *WatchdogResult) float64 { return durMs(r.CPUPerPeriod()) }))),
			fmtSummary(Summarize(v.wdFig(n, func(r *WatchdogResult) float64 { return r.CPU.Seconds() / r.Window.Elapsed.Seconds() })), fmtPercent),
			fmtFloat(0)(sum(v.wdFig(n, func(r *WatchdogResult) float64 { return float64(r.Lost) }))),
			msS(Summarize(v.wdFig(n, func(r *WatchdogResult) float64 { return durMs(r.Acquire) }))))
	}
	v.p("%s\n", t)
	v.p("Round trips per period depend on where the window's edges fall between two renewal batches; round trips to renew every lease once (round trips ÷ (renewal commands ÷ leases)) do not. ")
	v.p("\"Leases lost\" counts unlocks that failed at the end (rueidislock's unlock cannot fail, so it shows 0 whatever happened).\n\n")
}

// --- scenario 5 ---

func (v *view) redlock() {
	p := v.res.Plan
	v.p("## 5. Redlock over independent redis-servers\n\n")
	names := v.names(func(t TargetInfo) bool { return t.Multi })
	hasDlock := false
	for _, n := range names {
		if t, _ := v.target(n); t.Kind == KindDlock {
			hasDlock = true
		}
	}
	if !hasDlock {
		v.p("dlock's Redlock was not part of this run (bench/dlock_redlock.go adds it once `dlock.NewRedlock` exists); redsync's figures stand alone.\n\n")
	}
	untuned := v.names(func(t TargetInfo) bool { return t.Multi && !t.Tuned })
	dl := v.names(func(t TargetInfo) bool { return t.Multi && t.Kind == KindDlock })
	peers := v.names(func(t TargetInfo) bool { return t.Multi && t.Kind != KindDlock })
	for _, n := range p.RedlockNodes {
		v.p("### %d nodes\n\n", n)
		v.p("Uncontended (as scenario 1):\n\n%s\n", v.uncontendedTable(n, untuned, p.RedlockGoroutines, nil))
		if len(dl) > 0 {
			head := []string{"ratio"}
			for _, g := range p.RedlockGoroutines {
				head = append(head, fmt.Sprintf("g=%d", g))
			}
			t := &table{head: head}
			for _, d := range dl {
				for _, pe := range peers {
					if tp, _ := v.target(pe); tp.Tuned {
						continue
					}
					row := []string{d + " ÷ " + pe}
					for _, g := range p.RedlockGoroutines {
						row = append(row, ratio(Summarize(Ratios(v.uncRate(d, g, n), v.uncRate(pe, g, n)))))
					}
					t.add(row...)
				}
			}
			v.p("%s\n", t)
		}
		v.p("Contended (as scenario 2):\n\n%s\n", v.contendedTable(n, names, nil))
		if len(dl) > 0 {
			v.p("%s\n", v.contendedRatios(n, dl, peers))
		}
		v.p("Commands per acquisition, contended:\n\n%s\n", v.contendedCommands(n, names))
	}
	v.delayedRedlock(untuned)
}

// delayedRedlock shows the runs over proxies that add latency to every
// node: what a fan-out to more nodes costs when the network, not this
// machine's CPU, sets the pace.
func (v *view) delayedRedlock(names []string) {
	p := v.res.Plan
	if p.RedlockLatency <= 0 || len(p.RedlockLatencyNodes) < 2 {
		return
	}
	lo, hi := p.RedlockLatencyNodes[0], p.RedlockLatencyNodes[len(p.RedlockLatencyNodes)-1]
	v.p("### Over links with a %s round trip\n\n", fmtMs(durMs(2*p.RedlockLatency)))
	v.p("On loopback, the %d servers and the client share this machine's two cores, so %d nodes cost about %d times the CPU of one, and the lock+unlock time grows with it whether the requests go out in parallel or not. "+
		"Here a proxy in front of each node delays every chunk by %s each way, as a network between machines would; scenario 1 at one goroutine:\n\n", hi, hi, hi/lo, fmtMs(durMs(p.RedlockLatency)))
	head := []string{"target"}
	for _, n := range p.RedlockLatencyNodes {
		head = append(head, fmt.Sprintf("%d node(s): pairs/s", n))
	}
	head = append(head, fmt.Sprintf("time per pair, %d nodes ÷ %d", hi, lo))
	t := &table{head: head}
	for _, n := range names {
		row := []string{n}
		for _, nodes := range p.RedlockLatencyNodes {
			row = append(row, rate(Summarize(v.delayedRate(n, nodes))))
		}
		row = append(row, ratio(Summarize(Ratios(v.delayedRate(n, lo), v.delayedRate(n, hi)))))
		t.add(row...)
	}
	v.p("%s\n", t)
}

// --- dlock's other primitives ---

// primitives shows dlock's primitives other than the Mutex in scenarios 1
// to 3, with dlock's Mutex (headline) beside them and, in scenarios 1 and
// 2, ratios to it and to the floor, run by run.
func (v *view) primitives() {
	p := v.res.Plan
	v.p("## dlock's other primitives: scenarios 1 to 3\n\n")
	prims := v.namesOf(func(t TargetInfo) bool { return t.Primitive && t.Single })
	if len(prims) == 0 {
		v.p("dlock's primitives other than the Mutex were not part of this run.\n\n")
		return
	}
	names := prims
	if _, ok := v.target(headline); ok {
		names = append([]string{headline}, prims...)
	}
	refs := v.refs(v.floorName(), headline)
	v.p("%s run scenarios 1 to 3 as the libraries do above, in the same repetitions on the same redis-server, with the settings listed under \"Libraries and settings\". ", "`"+strings.Join(prims, "`, `")+"`")
	v.p("`%s`, the Mutex, is repeated here for comparison: ×Mutex is the ratio to it, taken run by run as ×floor is. ", headline)
	v.p("They do not run in scenarios 4 and 5, and the tables and verdicts above leave them out.")
	if shared := v.namesOf(func(t TargetInfo) bool { return t.Shares }); len(shared) > 0 {
		v.p(" %s do not exclude, so they run in scenario 1 only.", "`"+strings.Join(shared, "`, `")+"`")
	}
	v.p("\n\n")
	v.p("Uncontended (as scenario 1):\n\n%s\n", v.uncontendedTable(1, names, p.UncontendedGoroutines, refs))
	v.p("What each uncontended pair costs, summed over every goroutine count and run (as in scenario 1):\n\n%s\n", v.uncontendedCommands(names))
	// Targets that share (Target.Shares) run scenario 1 only.
	excluding := v.namesOf(func(t TargetInfo) bool { return !t.Shares && (t.Primitive || t.Name == headline) })
	excl := func(ns []string) []string {
		return slices.DeleteFunc(slices.Clone(ns), func(n string) bool { return !slices.Contains(excluding, n) })
	}
	v.p("Contended (as scenario 2):\n\n%s\n", v.contendedTable(1, excl(names), refs))
	v.primitivesWaiting(excl(names), excl(prims))
	if len(v.res.GoBench) == 0 {
		v.p("(`go test -bench` figures were not part of this run.)\n\n")
		return
	}
	if t := v.goBenchTable(names, p.UncontendedGoroutines, refs); len(t.rows) > 0 {
		v.p("`go test -bench BenchmarkUncontended -benchmem` (as in scenario 1):\n\n%s\n", t)
	} else {
		v.p("(`go test -bench` has no figures for them in this run.)\n\n")
	}
}

// primitivesWaiting shows names (the Mutex and prims) in scenario 3, or
// says that prims did not run it: results from before they did (rendered
// again with -render) have none of their waiting runs.
func (v *view) primitivesWaiting(names, prims []string) {
	ran := false
	for _, r := range v.res.Waiting {
		for _, n := range prims {
			ran = ran || r.Target == n
		}
	}
	if !ran {
		v.p("(Scenario 3 was not part of this run for them.)\n\n")
		return
	}
	w := v.res.Plan.Waiting
	v.p("Waiting load (as scenario 3: %s goroutines on %d clients blocked on one lock that another client holds; the holder renews, so Redis's counts include its renewals). ",
		thousands(float64(w.Waiters)), w.Clients)
	v.p("Each of their waiters keeps a place of its own in the lock's queue; the waiters of one client on one lock keep their places together, one of them polling for all (docs/design.md, \"Waiters' places kept together\"), ")
	v.p("where the Mutex's waiters of one client share one place:\n\n")
	v.p("%s\n", v.waitingTable(names))
}

// --- method and problems ---

func (v *view) method() {
	v.p("## How it is measured\n\n")
	v.p("- All libraries in a scenario run against the same redis-server process, one after another, in an order rotated each repetition and reversed in every other one, so that no library always runs first or right after the same one; the server is emptied (FLUSHALL, SCRIPT FLUSH) before each library. The uncontended runs of scenarios 1 and 5 take every library at one goroutine count before the next.")
	if n := v.res.Plan.UncontendedSlices; n > 1 {
		v.p(" There the libraries take turns: after each one's warm-up, the measuring time is cut into %d windows that they run in turn, in an order rotated and reversed from turn to turn, every library's client open throughout; the server is emptied before each goroutine count.", n)
	}
	v.p("\n")
	v.p("- Each run builds fresh clients with go-redis's default options (rueidis's for rueidislock), warms up, then resets Redis's counters (CONFIG RESETSTAT) and reads INFO commandstats when the window closes. The harness's own commands (INFO, CONFIG, FLUSHALL, SCRIPT FLUSH, connection handshakes) are left out.\n")
	v.p("- \"Commands sent\" and \"round trips\" are counted in the client: a single command is one round trip, a pipeline of n commands is n commands and one round trip. \"Redis executed\" comes from commandstats and also counts what scripts call inside them (an EVALSHA whose script runs GET and DEL counts 3).\n")
	v.p("- Lock gets a context that can be cancelled but has no deadline, as a request's; Unlock gets `context.Background()`. (With a deadline dlock takes a costlier path on a go-redis client without `ContextTimeoutEnabled`; `go test -bench` measures it apart, in scenario 1.)\n")
	v.p("- Times come from one monotonic clock in the benchmark process. Hand-off: from just before the releasing goroutine calls unlock to the return of the next different goroutine's `Lock`; it includes the releaser's own unlock work (for dlock, stopping renewal) and the notification to the waiter.\n")
	v.p("- Peers that give up waiting on their own (redsync after its tries, redislock at its deadline) are called again at once, as a caller that must have the lock would; the wait is measured across those calls.\n")
	v.p("- A library that gets a run wrong (two holders at once, a lock lost while held, an unexpected error) is listed below, never silently dropped.\n\n")
}

func (v *view) problems() {
	var lines []string
	add := func(kind, target string, info RunInfo, errs Errors, extra string) {
		if info.Err == "" && errs.Count == 0 && extra == "" {
			return
		}
		s := fmt.Sprintf("- %s, %s, repetition %d", kind, target, info.Rep+1)
		if info.Nodes > 1 {
			s += fmt.Sprintf(", %d nodes", info.Nodes)
		}
		if info.Err != "" {
			s += ": run failed: " + info.Err
		}
		if errs.Count > 0 {
			s += fmt.Sprintf(": %d unexpected errors, the first: %s", errs.Count, errs.First)
		}
		lines = append(lines, s+extra)
	}
	for _, r := range v.res.Uncontended {
		add("uncontended", r.Target+fmt.Sprintf(" g=%d", r.Goroutines), r.RunInfo, r.Errors, "")
	}
	for _, r := range v.res.Contended {
		extra := ""
		if r.Overlaps > 0 {
			extra = fmt.Sprintf("; **%d grants overlapped another holder**", r.Overlaps)
		}
		add("contended", r.Target, r.RunInfo, r.Errors, extra)
	}
	for _, r := range v.res.Waiting {
		extra := ""
		if r.Grants > 0 {
			extra = fmt.Sprintf("; %d waiters got the lock while it was held", r.Grants)
		}
		add("waiting", r.Target, r.RunInfo, r.Errors, extra)
	}
	for _, r := range v.res.Watchdog {
		extra := ""
		if r.Lost > 0 {
			extra = fmt.Sprintf("; %d leases lost", r.Lost)
		}
		add("watchdog", r.Target, r.RunInfo, r.Errors, extra)
	}
	for _, r := range v.res.Election {
		add("election", headline, r.RunInfo, r.Errors, "")
	}
	v.p("## Errors and anomalies\n\n")
	if len(lines) == 0 {
		v.p("None: no run failed, no two holders overlapped, no lease was lost, no unexpected error.\n")
		return
	}
	v.p("%s\n", strings.Join(lines, "\n"))
}
