package bench

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

var (
	reportFlag  = flag.Bool("report", false, "run every scenario and write the report (slow: this is what make bench runs)")
	reportOut   = flag.String("out", "../docs", "where to write benchmarks.md and its chart")
	resultsDir  = flag.String("results", "results", "where to write the raw results as JSON")
	goBenchFile = flag.String("gobench", "", "`go test -bench` output of BenchmarkUncontended to include in the report")
	instrFile   = flag.String("instructions-from", "", "server instructions per pair (written by -instructions -instructions-out) to include in the report")
	reps        = flag.Int("reps", 0, "repetitions of every scenario (0: the plan's 5)")
	scale       = flag.Float64("scale", 1, "multiplies every warm-up and measuring window (e.g. 2 for steadier figures)")
	targetNames = flag.String("targets", "", "comma-separated target names to run (default: all)")
	renderFrom  = flag.String("render", "", "render the report from this results JSON instead of running anything")
)

// TestReport is the report generator behind `make bench`. It runs only with
// -report (or -render), never in `go test ./...`.
func TestReport(t *testing.T) {
	if !*reportFlag && *renderFrom == "" {
		t.Skip("slow; run with -args -report (make bench does)")
	}
	var res *Results
	if *renderFrom != "" {
		b, err := os.ReadFile(*renderFrom)
		if err != nil {
			t.Fatal(err)
		}
		res = new(Results)
		if err := json.Unmarshal(b, res); err != nil {
			t.Fatal(err)
		}
	} else {
		res = runReport(t)
	}
	if *goBenchFile != "" {
		f, err := os.Open(*goBenchFile)
		if err != nil {
			t.Fatal(err)
		}
		res.GoBench, err = ParseGoBench(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if *instrFile != "" {
		var err error
		if res.Instructions, err = ReadInstructions(*instrFile); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteReport(res, *reportOut); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", filepath.Join(*reportOut, "benchmarks.md"))
}

// selectedTargets returns the targets that -targets names, in its order,
// or every target.
func selectedTargets(t *testing.T) []Target {
	t.Helper()
	if *targetNames == "" {
		return Targets()
	}
	var targets []Target
	for _, n := range strings.Split(*targetNames, ",") {
		tg, ok := TargetByName(strings.TrimSpace(n))
		if !ok {
			t.Fatalf("-targets: no target %q", n)
		}
		targets = append(targets, tg)
	}
	return targets
}

func runReport(t *testing.T) *Results {
	plan := DefaultPlan().Scale(*scale)
	if *reps > 0 {
		plan.Reps = *reps
	}
	targets := selectedTargets(t)
	single := redistest.Start(t)
	maxNodes := 0
	for _, n := range plan.RedlockNodes {
		maxNodes = max(maxNodes, n)
	}
	maxDelayed := 0
	for _, n := range plan.RedlockLatencyNodes {
		maxDelayed = max(maxDelayed, n)
	}
	var nodes, delayed []string
	for i, s := range redistest.StartNodes(t, max(maxNodes, maxDelayed)) {
		nodes = append(nodes, s.Addr())
		if i < maxDelayed {
			p := redistest.StartProxy(t, s.Addr())
			p.SetLatency(plan.RedlockLatency)
			delayed = append(delayed, p.Addr())
		}
	}
	srv := NewServers(single.Addr())
	defer srv.Close()

	// No deadline: the scenarios give Lock a context that can be cancelled
	// but has none, as a request's (BenchmarkUncontended does the same).
	// A deadline would send every dlock call through the go-redis
	// driver's deadline path (a goroutine per call, for a client without
	// ContextTimeoutEnabled), which BenchmarkUncontended measures apart
	// as dlock-deadline; the test's -timeout bounds the run.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &Suite{Plan: plan, Targets: targets, Single: srv, Nodes: nodes, Delayed: delayed, Log: t.Logf}
	loadBefore, cpuBefore := LoadAvg(), sampleCPU()
	res, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res.Machine = DescribeMachine(ctx, srv, "..")
	res.Machine.Load = "before the run " + loadBefore + ", after it " + LoadAvg()
	res.Machine.Beside = sampleCPU().since(cpuBefore)
	for _, tg := range targets {
		res.Targets = append(res.Targets, tg.Info(res.Machine.Modules[tg.Module]))
	}
	if err := os.MkdirAll(*resultsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(*resultsDir, "results.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("raw results in %s", path)
	return res
}
