package bench

import (
	"fmt"
	"time"
)

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
