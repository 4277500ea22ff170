package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestSuiteSmoke runs every scenario briefly for a few targets and renders
// the report, to show the machinery works end to end. It checks correctness
// only (no errors, no overlapping holders, no lost lease): speed is never
// asserted.
func TestSuiteSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers and runs every scenario briefly")
	}
	single := redistest.Start(t)
	var nodes []string
	for _, s := range redistest.StartNodes(t, 3) {
		nodes = append(nodes, s.Addr())
	}
	srv := NewServers(single.Addr())
	defer srv.Close()

	ms := time.Millisecond
	plan := Plan{
		Reps:                  1,
		UncontendedGoroutines: []int{1, 4},
		UncontendedWarm:       50 * ms,
		UncontendedDur:        100 * ms,
		UncontendedSlices:     2,
		Contended:             ContendedSpec{Clients: 2, Goroutines: 4, Warm: 50 * ms, Dur: 200 * ms},
		Waiting:               WaitingSpec{Clients: 2, Waiters: 20, Warm: 100 * ms, Dur: 150 * ms},
		Watchdog:              WatchdogSpec{Leases: 50, TTL: 3 * time.Second, Warm: 100 * ms, Dur: 300 * ms},
		Election: ElectionSpec{Warm: 50 * ms, Dur: 150 * ms, IdleDur: 200 * ms,
			Campaigners: 3, Observers: 3, HandoffCampaigners: 3, Handoffs: 20},
		RedlockNodes:      []int{3},
		RedlockGoroutines: []int{2},
	}
	var targets []Target
	prims := []string{"dlock-fair", "dlock-reentrant", "dlock-rwmutex", "dlock-semaphore"}
	for _, name := range append([]string{"floor", "dlock", "redsync", "rueidislock"}, prims...) {
		tg, ok := TargetByName(name)
		if !ok {
			t.Fatalf("no target %s", name)
		}
		targets = append(targets, tg)
	}
	s := &Suite{Plan: plan, Targets: targets, Single: srv, Nodes: nodes, Log: t.Logf}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	peerFailed := checkSmokeRuns(t, plan, prims, res)
	res.Machine = DescribeMachine(ctx, srv, "..")
	for _, tg := range targets {
		res.Targets = append(res.Targets, tg.Info(""))
	}
	checkSmokeReport(t, res, prims, peerFailed)
}

// checkSmokeRuns fails t for a run of TestSuiteSmoke's plan that went
// wrong or is missing, and reports whether a peer's own watchdog run
// failed (which the report then lists).
func checkSmokeRuns(t *testing.T, plan Plan, prims []string, res *Results) (peerFailed bool) {
	t.Helper()
	for _, r := range res.Uncontended {
		if r.Err != "" || r.Errors.Count > 0 || r.Pairs == 0 {
			t.Errorf("uncontended %s g=%d nodes=%d: err %q, errors %+v, %d pairs", r.Target, r.Goroutines, r.Nodes, r.Err, r.Errors, r.Pairs)
		}
	}
	for _, r := range res.Contended {
		if r.Err != "" || r.Errors.Count > 0 || r.Overlaps > 0 || r.Grants == 0 {
			t.Errorf("contended %s nodes=%d: err %q, errors %+v, %d overlaps, %d grants", r.Target, r.Nodes, r.Err, r.Errors, r.Overlaps, r.Grants)
		}
	}
	for _, r := range res.Waiting {
		if r.Err != "" || r.Errors.Count > 0 || r.Grants > 0 {
			t.Errorf("waiting %s: err %q, errors %+v, %d grants while held", r.Target, r.Err, r.Errors, r.Grants)
		}
	}
	// The primitives run in scenarios 1 to 3, and only there (the
	// watchdog's count below and Redlock's Multi targets leave them out).
	for _, name := range prims {
		var unc, con, wait int
		for _, r := range res.Uncontended {
			if r.Target == name {
				unc++
			}
		}
		for _, r := range res.Contended {
			if r.Target == name {
				con++
			}
		}
		for _, r := range res.Waiting {
			if r.Target == name {
				wait++
			}
		}
		if unc != len(plan.UncontendedGoroutines) || con != 1 || wait != 1 {
			t.Errorf("%s ran %d uncontended, %d contended and %d waiting runs, want %d, 1 and 1", name, unc, con, wait, len(plan.UncontendedGoroutines))
		}
	}
	for _, r := range res.Waiting {
		// Each primitive's waiter takes a place of its own in Redis, so
		// its clients send at least a command per waiter, and RunWaiting
		// sees them all started before the warm-up runs out. (The
		// Mutex's waiters of one client share one place, so this is
		// not asked of it.)
		if tg, _ := TargetByName(r.Target); tg.Primitive && r.Started >= plan.Waiting.Warm {
			t.Errorf("waiting %s: the waiters' first attempts took %v, the whole warm-up (%v)", r.Target, r.Started, plan.Waiting.Warm)
		}
	}
	if len(res.Election) != 1 {
		t.Errorf("election ran %d times, want once (with the dlock target)", len(res.Election))
	}
	for _, r := range res.Election {
		if r.Err != "" || r.Errors.Count > 0 || r.Cycles == 0 || len(r.Handoffs) < plan.Election.Handoffs {
			t.Errorf("election: err %q, errors %+v, %d cycles, %d hand-offs (want %d)", r.Err, r.Errors, r.Cycles, len(r.Handoffs), plan.Election.Handoffs)
		}
	}
	if len(res.Watchdog) != 2 {
		t.Errorf("watchdog ran %d targets, want dlock and rueidislock", len(res.Watchdog))
	}
	for _, r := range res.Watchdog {
		failed := r.Err != "" || r.Errors.Count > 0 || r.Lost > 0
		switch {
		case !failed:
		case strings.HasPrefix(r.Target, "dlock"):
			t.Errorf("watchdog %s: err %q, errors %+v, %d lost", r.Target, r.Err, r.Errors, r.Lost)
		default:
			// A peer's own timeouts on a loaded machine (rueidislock's
			// TryLock gives up on its own deadline) are the peer's, not
			// the harness's: the report lists them, and dlock's runs must
			// still be clean.
			t.Logf("watchdog %s: err %q, errors %+v, %d lost", r.Target, r.Err, r.Errors, r.Lost)
			peerFailed = true
		}
	}
	return peerFailed
}

// checkSmokeReport writes res's report and fails t unless it has every
// section, a figure for each of prims, and the chart.
func checkSmokeReport(t *testing.T, res *Results, prims []string, peerFailed bool) {
	t.Helper()
	dir := t.TempDir()
	if err := WriteReport(res, dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	wants := []string{"## dlock against its targets", "## 1. Uncontended", "## 2. Contended", "## 3. Waiting load",
		"## 4. Watchdog scale", "## 5. Redlock", "### 3 nodes", "## 6. Election", "## dlock's other primitives", ChartFile}
	if !peerFailed {
		wants = append(wants, "None: no run failed")
	}
	for _, want := range wants {
		if !strings.Contains(string(md), want) {
			t.Errorf("benchmarks.md lacks %q", want)
		}
	}
	sec := section(string(md), "## dlock's other primitives")
	waiting := section(string(md), "## 3. Waiting load")
	for _, name := range prims {
		// Uncontended, cost per pair, contended, waiting: each with a
		// figure.
		r := rows(sec, name)
		if len(r) != 4 {
			t.Errorf("the primitives' section has %d rows for %s, want 4", len(r), name)
			continue
		}
		if r[0][1] == "–" || r[2][1] == "–" || r[3][1] == "–" {
			t.Errorf("%s has no figure: uncontended %q, contended %q, waiting %q", name, r[0], r[2], r[3])
		}
		if r := rows(waiting, name); len(r) > 0 {
			t.Errorf("scenario 3's table lists %s: %q", name, r)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, ChartFile)); err != nil || fi.Size() == 0 {
		t.Errorf("chart: %v", err)
	}
}

// TestRotate: across repetitions each target runs first at most once in
// len(ts) of them, and its predecessor changes from one repetition to the
// next (rotation alone kept every target's neighbours).
func TestRotate(t *testing.T) {
	ts := []Target{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}, {Name: "e"}}
	before := func(order []Target) map[string]string {
		m := map[string]string{}
		for i := 1; i < len(order); i++ {
			m[order[i].Name] = order[i-1].Name
		}
		return m
	}
	firsts := map[string]bool{}
	for r := 0; r < len(ts); r++ {
		order := rotate(ts, r)
		if len(order) != len(ts) {
			t.Fatalf("rep %d: %d targets; want %d", r, len(order), len(ts))
		}
		if firsts[order[0].Name] {
			t.Errorf("rep %d: %s runs first again", r, order[0].Name)
		}
		firsts[order[0].Name] = true
		if r == 0 {
			continue
		}
		prev, cur := before(rotate(ts, r-1)), before(order)
		for name, p := range cur {
			if prev[name] == p {
				t.Errorf("reps %d and %d: %s runs right after %s in both", r-1, r, name, p)
			}
		}
	}
}
