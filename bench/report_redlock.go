package bench

import "fmt"

func (v *view) redlock() {
	p := v.res.Plan
	v.p("## 5. Redlock over independent redis-servers\n\n")
	names := v.names(func(t TargetInfo) bool { return t.Multi })
	hasDlock := false
	for _, n := range names {
		if t, _ := v.target(n); t.Kind == KindDlock {
			hasDlock = true
		}
	}
	if !hasDlock {
		v.p("dlock's Redlock was not part of this run (bench/dlock_redlock.go adds it once `dlock.NewRedlock` exists); redsync's figures stand alone.\n\n")
	}
	untuned := v.names(func(t TargetInfo) bool { return t.Multi && !t.Tuned })
	dl := v.names(func(t TargetInfo) bool { return t.Multi && t.Kind == KindDlock })
	peers := v.names(func(t TargetInfo) bool { return t.Multi && t.Kind != KindDlock })
	for _, n := range p.RedlockNodes {
		v.p("### %d nodes\n\n", n)
		v.p("Uncontended (as scenario 1):\n\n%s\n", v.uncontendedTable(n, untuned, p.RedlockGoroutines, nil))
		if len(dl) > 0 {
			head := []string{"ratio"}
			for _, g := range p.RedlockGoroutines {
				head = append(head, fmt.Sprintf("g=%d", g))
			}
			t := &table{head: head}
			for _, d := range dl {
				for _, pe := range peers {
					if tp, _ := v.target(pe); tp.Tuned {
						continue
					}
					row := []string{d + " ÷ " + pe}
					for _, g := range p.RedlockGoroutines {
						row = append(row, ratio(Summarize(Ratios(v.uncRate(d, g, n), v.uncRate(pe, g, n)))))
					}
					t.add(row...)
				}
			}
			v.p("%s\n", t)
		}
		v.p("Contended (as scenario 2):\n\n%s\n", v.contendedTable(n, names, nil))
		if len(dl) > 0 {
			v.p("%s\n", v.contendedRatios(n, dl, peers))
		}
		v.p("Commands per acquisition, contended:\n\n%s\n", v.contendedCommands(n, names))
	}
	v.delayedRedlock(untuned)
}

// delayedRedlock shows the runs over proxies that add latency to every
// node: what a fan-out to more nodes costs when the network, not this
// machine's CPU, sets the pace.
func (v *view) delayedRedlock(names []string) {
	p := v.res.Plan
	if p.RedlockLatency <= 0 || len(p.RedlockLatencyNodes) < 2 {
		return
	}
	lo, hi := p.RedlockLatencyNodes[0], p.RedlockLatencyNodes[len(p.RedlockLatencyNodes)-1]
	v.p("### Over links with a %s round trip\n\n", fmtMs(durMs(2*p.RedlockLatency)))
	v.p("On loopback, the %d servers and the client share this machine's two cores, so %d nodes cost about %d times the CPU of one, and the lock+unlock time grows with it whether the requests go out in parallel or not. "+
		"Here a proxy in front of each node delays every chunk by %s each way, as a network between machines would; scenario 1 at one goroutine:\n\n", hi, hi, hi/lo, fmtMs(durMs(p.RedlockLatency)))
	head := []string{"target"}
	for _, n := range p.RedlockLatencyNodes {
		head = append(head, fmt.Sprintf("%d node(s): pairs/s", n))
	}
	head = append(head, fmt.Sprintf("time per pair, %d nodes ÷ %d", hi, lo))
	t := &table{head: head}
	for _, n := range names {
		row := []string{n}
		for _, nodes := range p.RedlockLatencyNodes {
			row = append(row, rate(Summarize(v.delayedRate(n, nodes))))
		}
		row = append(row, ratio(Summarize(Ratios(v.delayedRate(n, lo), v.delayedRate(n, hi)))))
		t.add(row...)
	}
	v.p("%s\n", t)
}
