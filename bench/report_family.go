package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// perCall is the Mutex given its options per call; it is judged against the
// Mutex with the same options on the Client, not as a kind of its own.
const perCall = "dlock-percall"

// The figures the verdicts judge, for the Mutex and the family alike.
func handoffP50(r *ContendedResult) float64  { return durMs(r.HandoffQuantile(0.5)) }
func longestWait(r *ContendedResult) float64 { return durMs(r.MaxWait()) }
func commandsPerAcq(r *ContendedResult) float64 {
	return float64(r.Window.Client.Commands) / float64(r.Grants)
}

// family shows dlock's other kinds against the targets that hold them to
// the Mutex's speed: ratios to the Mutex run by run, judged on the median,
// and the longest wait on the worst run, as the Mutex's own.
func (v *view) family() {
	kinds := v.namesOf(func(t TargetInfo) bool { return t.Primitive && t.Single && t.Name != perCall })
	if len(kinds) == 0 {
		return
	}
	v.p("## dlock's family against its targets\n\n")
	v.p("The kinds above against the Mutex (`%s`) of the same runs. A row lists each kind's figure; \"missed\" names the kinds that miss.\n\n", headline)
	t := &table{head: []string{"target", "measured", "status"}}
	for _, vd := range v.familyVerdicts(kinds) {
		t.add(vd.target, vd.measured, vd.status)
	}
	v.p("%s\n", t)
}

func (v *view) familyVerdicts(kinds []string) []verdict {
	var out []verdict
	vsMutex := func(f func(name string) []float64) func(string) Summary {
		return func(n string) Summary { return Summarize(Ratios(f(n), f(headline))) }
	}
	median := func(s Summary) float64 { return s.Median }
	for _, g := range v.res.Plan.UncontendedGoroutines {
		rate := vsMutex(func(n string) []float64 { return v.uncRate(n, g, 1) })
		out = append(out, everyKind(fmt.Sprintf("uncontended, %d goroutine(s): ≥ 0.9× the Mutex's pairs/s", g),
			kinds, rate, median, fmtRatioValue, func(x float64) bool { return x >= 0.9 }))
	}
	contended := present(kinds, "dlock-reentrant", "dlock-rwmutex", "dlock-semaphore")
	con := func(f func(*ContendedResult) float64) func(string) Summary {
		return func(n string) Summary { return Summarize(v.conFig(n, 1, f)) }
	}
	out = append(out,
		everyKind("contended: ≥ 0.9× the Mutex's acquisitions/s", contended,
			vsMutex(func(n string) []float64 { return v.conFig(n, 1, (*ContendedResult).AcqPerSec) }), median, fmtRatioValue,
			func(x float64) bool { return x >= 0.9 }),
		everyKind("contended: hand-off p50 ≤ 0.1 ms", contended, con(handoffP50), median, fmtMs,
			func(x float64) bool { return x <= 0.1 }),
		everyKind("contended: no goroutine waits > 20 ms (worst run)", contended, con(longestWait),
			func(s Summary) float64 { return s.Max }, fmtMs, func(x float64) bool { return x <= 20 }),
		everyKind("contended: barging ≤ 10%", contended, con((*ContendedResult).BargingShare), median, fmtPercent,
			func(x float64) bool { return x <= 0.10 }))
	if fair := present(kinds, "dlock-fair"); len(fair) > 0 {
		out = append(out,
			everyKind("contended, strict order: hand-off p50 ≤ 0.15 ms", fair, con(handoffP50), median, fmtMs,
				func(x float64) bool { return x <= 0.15 }),
			everyKind("contended, strict order: ≤ 3 commands sent per acquisition", fair, con(commandsPerAcq), median,
				fmtFloat(2), func(x float64) bool { return x <= 3 }))
	}
	if len(v.res.Instructions) > 0 {
		out = append(out, everyKind("server instructions per pair ≤ 1.3× the Mutex's", kinds, v.instructionsVsMutex, median,
			fmtRatioValue, func(x float64) bool { return x <= 1.3 }))
	}
	waiters := append([]string{headline}, kinds...)
	out = append(out, everyKind(fmt.Sprintf("waiting: ≤ 150 commands/s executed by Redis while %s goroutines wait", thousands(float64(v.res.Plan.Waiting.Waiters))),
		v.ranWaiting(waiters), func(n string) Summary { return Summarize(v.waitFig(n, (*WaitingResult).CommandsPerSec)) }, median,
		thousands, func(x float64) bool { return x <= 150 }))
	if _, ok := v.target(perCall); ok {
		var parts, missed []string
		for _, g := range v.res.Plan.UncontendedGoroutines {
			s := Summarize(Ratios(v.uncRate(perCall, g, 1), v.uncRate(headline, g, 1)))
			part := fmt.Sprintf("g=%d %.4f×", g, s.Median) // 0.97 is a fine line: four digits show which side
			parts = append(parts, part)
			if !(s.Median >= 0.97) {
				missed = append(missed, part)
			}
		}
		status := "met"
		if len(missed) > 0 {
			status = "**missed**: " + strings.Join(missed, ", ")
		}
		out = append(out, verdict{"options per call: ≥ 0.97× the Mutex's pairs/s with the same options on the Client", perCall + ": " + strings.Join(parts, ", "), status})
	}
	if d := v.names(func(t TargetInfo) bool { return t.Multi && t.Kind == KindDlock }); len(d) > 0 && slices.Contains(v.res.Plan.RedlockNodes, 3) {
		s := Summarize(v.conFig(d[0], 3, longestWait))
		out = append(out, verdict{"Redlock over 3 nodes, contended: no goroutine waits > 30 ms (worst run)", d[0] + ": " + msS(s),
			atMost(s.Max, 30, fmtMs(s.Max-30))})
	}
	return out
}

// everyKind judges one figure of each of names: fig summarizes a kind's
// runs, judged picks the value judged (and shown first), and ok tells
// whether it meets the target.
func everyKind(target string, names []string, fig func(string) Summary, judged func(Summary) float64, format func(float64) string, ok func(float64) bool) verdict {
	var parts, missed []string
	measured := 0
	for _, n := range names {
		s := fig(n)
		x := judged(s)
		if math.IsNaN(x) {
			continue
		}
		measured++
		part := fmt.Sprintf("%s %s", strings.TrimPrefix(n, "dlock-"), format(x))
		parts = append(parts, part)
		if !ok(x) {
			missed = append(missed, part)
		}
	}
	status := "met"
	switch {
	case measured == 0:
		status = "not measured"
	case len(missed) > 0:
		status = "**missed**: " + strings.Join(missed, ", ")
	}
	return verdict{target, strings.Join(parts, ", "), status}
}

// present returns those of want that are among names, in want's order.
func present(names []string, want ...string) []string {
	return slices.DeleteFunc(want, func(n string) bool { return !slices.Contains(names, n) })
}

// ranWaiting returns those of names that ran scenario 3.
func (v *view) ranWaiting(names []string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool {
		return !slices.ContainsFunc(v.res.Waiting, func(r WaitingResult) bool { return r.Target == n })
	})
}

// instructions returns name's server instructions per pair, or NaN.
func (v *view) instructions(name string) float64 {
	for _, r := range v.res.Instructions {
		if r.Target == name {
			return r.PerPair
		}
	}
	return math.NaN()
}

// instructionsVsMutex is name's server instructions per pair over the
// Mutex's, as a Summary of the one count.
func (v *view) instructionsVsMutex(name string) Summary {
	x := v.instructions(name) / v.instructions(headline)
	return Summary{Median: x, Min: x, Max: x, N: 1}
}

// instructionsTable shows the server's instructions per pair for names,
// against refs' (the floor's, the Mutex's).
func (v *view) instructionsTable(names []string, refs []ref) *table {
	head := []string{"target", "instructions per pair"}
	for _, rf := range refs {
		head = append(head, "÷ "+rf.label+"'s")
	}
	t := &table{head: head}
	for _, n := range names {
		x := v.instructions(n)
		if math.IsNaN(x) {
			continue
		}
		row := []string{n, fmt.Sprintf("%.1fk", x/1000)}
		for _, rf := range refs {
			row = append(row, fmtRatioValue(x/v.instructions(rf.name)))
		}
		t.add(row...)
	}
	return t
}
