package bench

import (
	"slices"
	"strings"
)

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
	if t := v.instructionsTable(names, refs); len(t.rows) > 0 {
		v.p("What redis-server executed per uncontended pair at one goroutine, counted under valgrind's callgrind by `make instructions` (%d pairs each) in this `make bench`: a count that repeats to within about 1%% where timings drift:\n\n%s\n",
			v.res.Instructions[0].Pairs, t)
	}
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
