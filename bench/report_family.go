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
	v.p("%s\n", verdictTable(v.familyVerdicts(kinds)))
}

func (v *view) familyVerdicts(kinds []string) []verdict {
	var out []verdict
	vsMutex := func(f func(name string) []float64) func(string) float64 {
		return func(n string) float64 { return Summarize(Ratios(f(n), f(headline))).Median }
	}
	for _, g := range v.res.Plan.UncontendedGoroutines {
		rate := vsMutex(func(n string) []float64 { return v.uncRate(n, g, 1) })
		out = append(out, judgeEach(fmt.Sprintf("uncontended, %d goroutine(s): ≥ 0.9× the Mutex's pairs/s", g),
			kindFigures(kinds, rate), fmtRatioValue, func(x float64) bool { return x >= 0.9 }))
	}
	contended := present(kinds, "dlock-reentrant", "dlock-rwmutex", "dlock-semaphore")
	// con is a contended figure's median over the runs, or with worst its
	// largest, as the Mutex's longest wait is judged.
	con := func(f func(*ContendedResult) float64, worst bool) func(string) float64 {
		return func(n string) float64 {
			s := Summarize(v.conFig(n, 1, f))
			if worst {
				return s.Max
			}
			return s.Median
		}
	}
	out = append(out,
		judgeEach("contended: ≥ 0.9× the Mutex's acquisitions/s", kindFigures(contended,
			vsMutex(func(n string) []float64 { return v.conFig(n, 1, (*ContendedResult).AcqPerSec) })),
			fmtRatioValue, func(x float64) bool { return x >= 0.9 }),
		judgeEach("contended: hand-off p50 ≤ 0.1 ms", kindFigures(contended, con(handoffP50, false)), fmtMs,
			func(x float64) bool { return x <= 0.1 }),
		judgeEach("contended: no goroutine waits > 20 ms (worst run)", kindFigures(contended, con(longestWait, true)), fmtMs,
			func(x float64) bool { return x <= 20 }),
		judgeEach("contended: barging ≤ 10%", kindFigures(contended, con((*ContendedResult).BargingShare, false)), fmtPercent,
			func(x float64) bool { return x <= 0.10 }))
	if fair := present(kinds, "dlock-fair"); len(fair) > 0 {
		out = append(out,
			judgeEach("contended, strict order: hand-off p50 ≤ 0.15 ms", kindFigures(fair, con(handoffP50, false)), fmtMs,
				func(x float64) bool { return x <= 0.15 }),
			judgeEach("contended, strict order: ≤ 3 commands sent per acquisition", kindFigures(fair, con(commandsPerAcq, false)),
				fmtFloat(2), func(x float64) bool { return x <= 3 }))
	}
	if len(v.res.Instructions) > 0 {
		out = append(out, judgeEach("server instructions per pair ≤ 1.3× the Mutex's",
			kindFigures(kinds, func(n string) float64 { return v.instructions(n) / v.instructions(headline) }),
			fmtRatioValue, func(x float64) bool { return x <= 1.3 }))
	}
	waiters := append([]string{headline}, kinds...)
	out = append(out, judgeEach(fmt.Sprintf("waiting: ≤ 150 commands/s executed by Redis while %s goroutines wait", thousands(float64(v.res.Plan.Waiting.Waiters))),
		kindFigures(v.ranWaiting(waiters), func(n string) float64 { return Summarize(v.waitFig(n, (*WaitingResult).CommandsPerSec)).Median }),
		thousands, func(x float64) bool { return x <= 150 }))
	if _, ok := v.target(perCall); ok {
		var figs []figure
		for _, g := range v.res.Plan.UncontendedGoroutines {
			figs = append(figs, figure{fmt.Sprintf("g=%d", g), Summarize(Ratios(v.uncRate(perCall, g, 1), v.uncRate(headline, g, 1))).Median})
		}
		// 0.97 is a fine line: four digits show which side of it a figure is.
		vd := judgeEach("options per call: ≥ 0.97× the Mutex's pairs/s with the same options on the Client", figs,
			func(x float64) string { return fmt.Sprintf("%.4f×", x) }, func(x float64) bool { return x >= 0.97 })
		vd.measured = perCall + ": " + vd.measured
		out = append(out, vd)
	}
	if d := v.names(func(t TargetInfo) bool { return t.Multi && t.Kind == KindDlock }); len(d) > 0 && slices.Contains(v.res.Plan.RedlockNodes, 3) {
		s := Summarize(v.conFig(d[0], 3, longestWait))
		out = append(out, verdict{"Redlock over 3 nodes, contended: no goroutine waits > 30 ms (worst run)", d[0] + ": " + msS(s),
			atMost(s.Max, 30, fmtMs(s.Max-30))})
	}
	return out
}

// figure is one judged value of a verdict row, labelled (a kind, a
// goroutine count); NaN when the run lacks it.
type figure struct {
	label string
	x     float64
}

// kindFigures returns value for each of names, labelled with the name
// short of its "dlock-".
func kindFigures(names []string, value func(name string) float64) []figure {
	figs := make([]figure, len(names))
	for i, n := range names {
		figs[i] = figure{strings.TrimPrefix(n, "dlock-"), value(n)}
	}
	return figs
}

// judgeEach judges each of figs against a target (ok): measured lists them
// all, the status names those that miss; figures that were not measured
// are left out.
func judgeEach(target string, figs []figure, format func(float64) string, ok func(float64) bool) verdict {
	var parts, missed []string
	for _, f := range figs {
		if math.IsNaN(f.x) {
			continue
		}
		part := f.label + " " + format(f.x)
		parts = append(parts, part)
		if !ok(f.x) {
			missed = append(missed, part)
		}
	}
	status := "met"
	switch {
	case len(parts) == 0:
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
