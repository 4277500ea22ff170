package bench

import (
	"fmt"
	"math"
	"strings"
)

type verdict struct {
	target, measured, status string
}

func (v *view) headline() {
	v.p("## dlock against its targets\n\n")
	v.p("Judged on `%s` (its defaults). \"Missed\" says by how much.\n\n", headline)
	v.p("%s\n", verdictTable(v.verdicts()))
}

// verdictTable shows vds, one row each.
func verdictTable(vds []verdict) *table {
	t := &table{head: []string{"target", "measured", "status"}}
	for _, vd := range vds {
		t.add(vd.target, vd.measured, vd.status)
	}
	return t
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

// verdicts judges the headline target against every target of the report.
func (v *view) verdicts() []verdict {
	out := v.uncontendedVerdicts()
	out = append(out, v.contendedVerdicts()...)
	out = append(out, v.loadVerdicts()...)
	return append(out, v.redlockVerdicts()...)
}

// uncontendedVerdicts judges scenario 1 against the floor and the peers,
// and the allocations per pair against the floor's.
func (v *view) uncontendedVerdicts() []verdict {
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
	return out
}

// contendedVerdicts judges scenario 2: rate against the peers, hand-off
// latency, the longest wait, barging and commands per acquisition.
func (v *view) contendedVerdicts() []verdict {
	var out []verdict
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
	p50 := Summarize(v.conFig(headline, 1, handoffP50))
	p99 := Summarize(v.conFig(headline, 1, func(r *ContendedResult) float64 { return durMs(r.HandoffQuantile(0.99)) }))
	out = append(out, verdict{"contended: hand-off p50 ≤ 0.1 ms", msS(p50), atMost(p50.Median, 0.1, fmtMs(p50.Median-0.1))})
	out = append(out, verdict{"contended: hand-off p99 ≤ 0.5 ms", msS(p99), atMost(p99.Median, 0.5, fmtMs(p99.Median-0.5))})
	maxWait := Summarize(v.conFig(headline, 1, longestWait))
	stall := Summarize(v.conFig(headline, 1, func(r *ContendedResult) float64 { return durMs(r.Stall) }))
	out = append(out, verdict{"contended: no goroutine waits > 20 ms", fmt.Sprintf("longest wait %s; worst of all runs %s (the process stood still up to %s in the same runs, whoever held the lock)",
		msS(maxWait), fmtMs(maxWait.Max), fmtMs(stall.Max)),
		atMost(maxWait.Max, 20, fmtMs(maxWait.Max-20))})
	barge := Summarize(v.conFig(headline, 1, (*ContendedResult).BargingShare))
	out = append(out, verdict{"contended: barging ≤ 10%", fmtSummary(barge, fmtPercent), atMost(barge.Median, 0.10, fmtPercent(barge.Median-0.10))})
	cpa := Summarize(v.conFig(headline, 1, commandsPerAcq))
	spa := Summarize(v.conFig(headline, 1, func(r *ContendedResult) float64 { return float64(r.Window.Server.Total()) / float64(r.Grants) }))
	out = append(out, verdict{"contended: ≤ 3 commands per acquisition", fmt.Sprintf("%s sent by the clients (%s executed by Redis, scripts' inner calls included)",
		fmtSummary(cpa, fmtFloat(2)), fmtSummary(spa, fmtFloat(1))), atMost(cpa.Median, 3, fmtFloat(2)(cpa.Median-3))})
	return out
}

// loadVerdicts judges scenarios 3 and 4: commands while many wait, and the
// watchdog's round trips.
func (v *view) loadVerdicts() []verdict {
	var out []verdict
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
	return out
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
