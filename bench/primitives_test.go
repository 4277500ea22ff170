package bench

import (
	"strings"
	"testing"
	"time"
)

// primitivesResults is a made-up run of the floor, dlock's Mutex, the
// FairMutex and a peer in scenarios 1 to 3: the Mutex's pace changes from
// run to run and the FairMutex always makes half its pairs and a quarter of
// its acquisitions, so every ratio to the Mutex is exact. While waiting,
// the FairMutex's clients send 20, 22 and 24 commands/s and Redis executes
// three times as many, the Mutex's send 10/s.
func primitivesResults() *Results {
	plan := DefaultPlan()
	plan.Reps = 3 // the runs made up below
	plan.UncontendedGoroutines = []int{1, 8}
	res := &Results{Plan: plan}
	for _, name := range []string{"floor", "dlock", "dlock-fair", "redsync"} {
		tg, ok := TargetByName(name)
		if !ok {
			panic("no target " + name)
		}
		res.Targets = append(res.Targets, tg.Info(""))
	}
	mutexPairs := []int64{800, 1000, 600}
	for rep := 0; rep < plan.Reps; rep++ {
		info := RunInfo{Rep: rep, Nodes: 1}
		for _, g := range plan.UncontendedGoroutines {
			for name, pairs := range map[string]int64{"floor": 1000, "dlock": mutexPairs[rep], "dlock-fair": mutexPairs[rep] / 2, "redsync": 700} {
				res.Uncontended = append(res.Uncontended, UncontendedResult{RunInfo: info, Target: name, Goroutines: g,
					Window: Window{Elapsed: time.Second}, Pairs: pairs})
			}
		}
		for name, grants := range map[string]int64{"floor": 2000, "dlock": 4000, "dlock-fair": 1000, "redsync": 1500} {
			res.Contended = append(res.Contended, &ContendedResult{RunInfo: info, Target: name, Clients: 4, Goroutines: 16,
				Window: Window{Elapsed: time.Second}, Grants: grants, Followed: grants - 1,
				Handoffs: []time.Duration{time.Millisecond}, Waits: [][]time.Duration{{time.Millisecond}}, PerGoroutine: []int64{grants}})
		}
		for name, sent := range map[string]int64{"floor": 200000, "dlock": 20, "dlock-fair": 40 + 4*int64(rep), "redsync": 8000} {
			server := CommandStats{"evalsha": sent}
			if name == "dlock-fair" {
				server["pexpire"] = 2 * sent
			}
			res.Waiting = append(res.Waiting, WaitingResult{RunInfo: info, Target: name, Clients: plan.Waiting.Clients, Waiters: plan.Waiting.Waiters,
				Window: Window{Elapsed: 2 * time.Second, Client: CounterSnapshot{Commands: sent, RoundTrips: sent}, Server: server}})
		}
	}
	for name, allocs := range map[string]float64{"floor": 20, "dlock": 16, "dlock-fair": 20} {
		res.GoBench = append(res.GoBench, GoBenchResult{Name: "Uncontended/" + name + "/g=1", N: 1000, NsPerOp: 1e5, AllocsPerOp: allocs})
	}
	return res
}

// section returns the part of md from heading to the next "## " heading.
func section(md, heading string) string {
	i := strings.Index(md, heading)
	if i < 0 {
		return ""
	}
	s := md[i+len(heading):]
	if j := strings.Index(s, "\n## "); j >= 0 {
		s = s[:j]
	}
	return s
}

// rows returns the cells of the table rows of md whose first cell is name.
func rows(md, name string) [][]string {
	var out [][]string
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "| "+name+" |") {
			var cells []string
			for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
				cells = append(cells, strings.TrimSpace(c))
			}
			out = append(out, cells)
		}
	}
	return out
}

// TestPrimitivesSection checks that dlock's other primitives are shown in a
// section of their own, with ratios to the Mutex and the floor taken run by
// run and their waiting load beside the Mutex's, and nowhere else in the
// scenarios' tables, scenario 3's included.
func TestPrimitivesSection(t *testing.T) {
	md := (&view{res: primitivesResults()}).markdown()
	const heading = "## dlock's other primitives: scenarios 1 to 3"
	sec := section(md, heading)
	if sec == "" {
		t.Fatalf("no section %q", heading)
	}
	if !strings.Contains(sec, "They do not run in scenarios 4 and 5") {
		t.Errorf("the section does not say which scenarios the primitives skip:\n%s", sec)
	}
	fair := rows(sec, "dlock-fair")
	// The uncontended table, the cost per pair, the contended table, the
	// waiting table.
	if len(fair) != 4 {
		t.Fatalf("dlock-fair has %d rows in the section, want 4:\n%s", len(fair), sec)
	}
	// target | g=1 pairs/s | ×floor | ×Mutex | g=8 pairs/s | ×floor | ×Mutex
	if got, want := fair[0], []string{"dlock-fair", "400 (300–500)", "0.40× (0.30×–0.50×)", "0.50×", "400 (300–500)", "0.40× (0.30×–0.50×)", "0.50×"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("uncontended row %q, want %q", got, want)
	}
	// target | acq/s | ×floor | ×Mutex | ...
	if got := fair[2]; len(got) < 4 || got[1] != "1,000" || got[2] != "0.50×" || got[3] != "0.25×" {
		t.Errorf("contended row %q, want 1,000 acq/s, 0.50× the floor, 0.25× the Mutex", got)
	}
	// target | commands sent/s | per waiter per second | round trips/s | Redis executed/s | what Redis executed | grants while held
	if got, want := fair[3], []string{"dlock-fair", "22 (20–24)", "0.022", "22 (20–24)", "66 (60–72)", "pexpire 44, evalsha 22", "0"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("waiting row %q, want %q", got, want)
	}
	m := rows(sec, "dlock")
	if len(m) != 4 || m[0][3] != "1.00×" || m[3][1] != "10" || m[3][2] != "0.010" {
		t.Errorf("the Mutex's rows in the section: %q, want 4 with ×Mutex 1.00× and 10 commands sent/s while waiting", m)
	}
	bench := rows(sec, "Uncontended/dlock-fair/g=1")
	// benchmark | ns | B | allocs | speed ×floor | allocs ÷ floor's | speed ×Mutex | allocs ÷ Mutex's
	if len(bench) != 1 || len(bench[0]) != 8 || bench[0][3] != "20" || bench[0][5] != "1.00×" || bench[0][7] != "1.25×" {
		t.Errorf("go test -bench rows for dlock-fair: %q, want 20 allocs, 1.00× the floor's, 1.25× the Mutex's", bench)
	}

	// Every other table leaves the primitives out.
	rest := strings.Replace(md, sec, "", 1)
	if r := rows(rest, "dlock-fair"); len(r) > 0 {
		t.Errorf("dlock-fair appears outside its section: %q", r)
	}
	if r := rows(section(md, "## 1. Uncontended"), "dlock"); len(r) == 0 {
		t.Errorf("scenario 1 lost the Mutex's row")
	}
	// Scenario 3's table lists the libraries, and only them.
	waiting := section(md, "## 3. Waiting load")
	for _, name := range []string{"floor", "dlock", "redsync"} {
		if r := rows(waiting, name); len(r) != 1 {
			t.Errorf("scenario 3 has %d rows for %s, want 1", len(r), name)
		}
	}
	if r := rows(waiting, "dlock-fair"); len(r) > 0 {
		t.Errorf("scenario 3 lists dlock-fair: %q", r)
	}
	// The waiting verdict reads the Mutex's figures, never the FairMutex's.
	if r := rows(section(md, "## dlock against its targets"), "waiting: near-zero commands/s while 1,000 goroutines wait (read here as ≤ 10/s, one per 100 waiters per second)"); len(r) != 1 || r[0][1] != "10 commands/s sent (10 executed by Redis)" {
		t.Errorf("waiting verdict %q, want the Mutex's 10 commands/s", r)
	}

	// Results whose primitives did not run scenario 3 (from before they
	// did) say so, and keep their other tables.
	res := primitivesResults()
	var libs []WaitingResult
	for _, r := range res.Waiting {
		if r.Target != "dlock-fair" {
			libs = append(libs, r)
		}
	}
	res.Waiting = libs
	sec = section((&view{res: res}).markdown(), heading)
	if !strings.Contains(sec, "Scenario 3 was not part of this run for them") || len(rows(sec, "dlock-fair")) != 3 {
		t.Errorf("without the primitives' waiting runs, the section reads %q", sec)
	}

	// Results without primitives say so.
	res = primitivesResults()
	res.Targets = res.Targets[:2]
	if sec := section((&view{res: res}).markdown(), heading); !strings.Contains(sec, "not part of this run") {
		t.Errorf("without primitives, the section reads %q", sec)
	}
}
