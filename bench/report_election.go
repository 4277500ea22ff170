package bench

import (
	"fmt"
	"math"
)

// --- scenario 6 ---

// el is the election run of repetition rep, or nil.
func (v *view) el(rep int) *ElectionResult {
	for i := range v.res.Election {
		r := &v.res.Election[i]
		if r.Rep == rep && r.Err == "" {
			return r
		}
	}
	return nil
}

func (v *view) elFig(f func(*ElectionResult) float64) []float64 {
	return v.perRep(func(rep int) float64 {
		if r := v.el(rep); r != nil {
			return f(r)
		}
		return nan()
	})
}

// mutexCommandsPerPair is the Mutex's Redis commands per lock+unlock pair
// in scenario 1 at one goroutine, run by run: the unit an election's
// costs are set against.
func (v *view) mutexCommandsPerPair() []float64 {
	return v.perRep(func(rep int) float64 {
		if r := v.unc(headline, 1, 1, false, rep); r != nil && r.Pairs > 0 {
			return float64(r.Window.Server.Total()) / float64(r.Pairs)
		}
		return nan()
	})
}

func (v *view) election() {
	if len(v.res.Election) == 0 {
		return
	}
	e := v.res.Plan.Election
	v.p("## 6. Election: what leading costs\n\n")
	v.p("dlock's `Election` with the defaults (TTL 30 s, renewed every 10 s), on the scenario 1–4 redis-server; no peer offers an election, so the Mutex is the yardstick. ")
	v.p("**Campaign**: one campaigner alone campaigns and resigns in a loop for %v (after %v); a cycle is one `Campaign` and one `Resign`. ", e.Dur, e.Warm)
	v.p("**Idle**: a leader leads while %d campaigners wait (each on a Client of its own) and %d observers watch (`Observe`), for %v after %v; nothing changes hands. ", e.Campaigners, e.Observers, e.IdleDur, e.Warm)
	v.p("**Resign hand-off**: %d campaigners take turns (lead, resign, campaign again) for %d hand-offs, each timed from the `Resign` call to the next leader's `Campaign` returning.\n\n", e.HandoffCampaigners, e.Handoffs)
	t := &table{head: []string{"figure", "median (min–max)"}}
	t.add("Redis executed per Campaign+Resign cycle", fmtSummary(Summarize(v.elFig((*ElectionResult).CommandsPerCycle)), fmtFloat(1)))
	t.add("… the Mutex's per lock+unlock pair (scenario 1, g=1)", fmtSummary(Summarize(v.mutexCommandsPerPair()), fmtFloat(1)))
	t.add("round trips per Campaign+Resign cycle", fmtSummary(Summarize(v.elFig((*ElectionResult).RoundTripsPerCycle)), fmtFloat(2)))
	t.add("Campaign+Resign cycles per second", rate(Summarize(v.elFig(func(r *ElectionResult) float64 {
		return float64(r.Cycles) / r.CycleWindow.Elapsed.Seconds()
	}))))
	t.add(fmt.Sprintf("Redis executed per idle second (leader, %d campaigners, %d observers)", e.Campaigners, e.Observers),
		fmtSummary(Summarize(v.elFig((*ElectionResult).IdleCommandsPerSec)), fmtFloat(1)))
	t.add("round trips per idle second, all Clients", fmtSummary(Summarize(v.elFig((*ElectionResult).IdleRoundTripsPerSec)), fmtFloat(1)))
	for _, q := range []float64{0.5, 0.99, 1} {
		label := fmt.Sprintf("resign hand-off p%.0f", 100*q)
		if q == 1 {
			label = "resign hand-off, longest"
		}
		t.add(label, msS(Summarize(v.elFig(func(r *ElectionResult) float64 {
			if len(r.Handoffs) == 0 {
				return math.NaN()
			}
			return durMs(r.HandoffQuantile(q))
		}))))
	}
	v.p("%s\n", t)
	v.p("Idle, the leader's renewals and the campaigners' refreshes of their places in the queue are all that runs; observers wait on pub/sub and poll the leader record only as a fallback. ")
	v.p("Per-command breakdowns of each window are in the raw results (bench/results/).\n\n")
}
