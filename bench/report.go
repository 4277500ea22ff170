package bench

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
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
	v.family()
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
	if m.Beside != "" {
		t.add("CPU taken beside the run", m.Beside)
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
