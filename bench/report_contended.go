package bench

import "time"

// contendedTable shows names' figures in scenario 2 over nodes servers,
// with their acquisitions per second against every one of refs.
func (v *view) contendedTable(nodes int, names []string, refs []ref) *table {
	head := []string{"target", "acq/s"}
	for _, rf := range refs {
		head = append(head, "×"+rf.label)
	}
	head = append(head, "hand-off p50", "hand-off p99", "hand-offs counted", "worst goroutine's wait p99", "longest wait", "process stalled", "goroutines starved", "barging", "commands sent / acq")
	t := &table{head: head}
	for _, n := range names {
		acq := v.conFig(n, nodes, func(r *ContendedResult) float64 { return r.AcqPerSec() })
		row := []string{n, rate(Summarize(acq))}
		for _, rf := range refs {
			row = append(row, ratio(Summarize(Ratios(acq, v.conFig(rf.name, nodes, func(r *ContendedResult) float64 { return r.AcqPerSec() })))))
		}
		row = append(row,
			msS(Summarize(v.conFig(n, nodes, func(r *ContendedResult) float64 { return durMs(r.HandoffQuantile(0.5)) }))),
			msS(Summarize(v.conFig(n, nodes, func(r *ContendedResult) float64 { return durMs(r.HandoffQuantile(0.99)) }))),
			rate(Summarize(v.conFig(n, nodes, func(r *ContendedResult) float64 { return float64(len(r.Handoffs)) }))),
			msS(Summarize(v.conFig(n, nodes, func(r *ContendedResult) float64 { return durMs(r.WorstP99()) }))),
			msS(Summarize(v.conFig(n, nodes, func(r *ContendedResult) float64 { return durMs(r.MaxWait()) }))),
			msS(Summarize(v.conFig(n, nodes, func(r *ContendedResult) float64 { return durMs(r.Stall) }))),
			fmtSummary(Summarize(v.conFig(n, nodes, func(r *ContendedResult) float64 { return float64(r.Starved()) })), fmtFloat(0)),
			fmtSummary(Summarize(v.conFig(n, nodes, (*ContendedResult).BargingShare)), fmtPercent),
			fmtSummary(Summarize(v.conFig(n, nodes, func(r *ContendedResult) float64 { return float64(r.Window.Client.Commands) / float64(r.Grants) })), fmtFloat(2)),
		)
		t.add(row...)
	}
	return t
}

func (v *view) contendedRatios(nodes int, dl, others []string) *table {
	t := &table{head: []string{"acq/s ratio", "median (range)"}}
	for _, d := range dl {
		for _, o := range others {
			t.add(d+" ÷ "+o, ratio(Summarize(Ratios(
				v.conFig(d, nodes, func(r *ContendedResult) float64 { return r.AcqPerSec() }),
				v.conFig(o, nodes, func(r *ContendedResult) float64 { return r.AcqPerSec() })))))
		}
	}
	return t
}

func (v *view) contendedCommands(nodes int, names []string) *table {
	return commandsTable("acquisition", names, func(n string) (Window, float64) {
		var w Window
		var grants float64
		for _, r := range v.res.Contended {
			if r.Target == n && r.Nodes == nodes && r.Err == "" {
				addWindow(&w, r.Window)
				grants += float64(r.Grants)
			}
		}
		return w, grants
	})
}

func (v *view) contended() {
	c := v.res.Plan.Contended
	v.p("## 2. Contended: %d goroutines on %d clients, one key\n\n", c.Goroutines, c.Clients)
	v.p("Each goroutine loops: `Lock`, bump a shared counter (the critical section), unlock. %v warm-up, then %v measured. ", c.Warm, c.Dur)
	v.p("**Hand-off** runs from the moment the releasing goroutine is about to call unlock to the moment a *different* goroutine's `Lock` returns; ")
	v.p("a grant to the goroutine that released last counts as **barging** instead. **Waits** run from a `Lock` call to its return; a wait still going when the window closes counts as long as it had waited, so a goroutine that never got the lock shows up as a long wait and as **starved**. ")
	v.p("**Process stalled** is the longest a 1 ms sleep in the same process woke late during the window: a time when the process, or the machine, ran none of its goroutines on time, whoever held the lock; a wait that spans such a stall is long whatever the library does.\n\n")
	names := v.names(func(t TargetInfo) bool { return t.Single })
	v.p("%s\n", v.contendedTable(1, names, floorRef(v.floorName())))
	v.p("![Hand-off latency and wait distributions per library](%s)\n\n", ChartFile)
	v.p("The chart pools every run's samples; a line that ends further right has a longer tail, and its lowest point is the single slowest sample. Dashed grey lines mark the targets (hand-off p50 0.1 ms and p99 0.5 ms, waits 20 ms).\n\n")
	dl := v.names(func(t TargetInfo) bool { return t.Kind == KindDlock && t.Single })
	others := v.names(func(t TargetInfo) bool { return t.Kind != KindDlock && t.Single })
	v.p("%s\n", v.contendedRatios(1, dl, others))
	v.p("Commands per acquisition, summed over the runs:\n\n%s\n", v.contendedCommands(1, names))
}

func (v *view) chartSeries(nodes int) (handoffs, waits []Series) {
	for _, n := range v.names(func(t TargetInfo) bool { return t.Single }) {
		var h, w []time.Duration
		for _, r := range v.res.Contended {
			if r.Target == n && r.Nodes == nodes && r.Err == "" {
				h = append(h, r.Handoffs...)
				w = append(w, r.AllWaits()...)
			}
		}
		t, _ := v.target(n)
		st := seriesStyle(n, t.Tuned || (t.Kind == KindDlock && n != headline), n == headline)
		handoffs = append(handoffs, Series{Name: n, Samples: SortDurations(h), Style: st})
		waits = append(waits, Series{Name: n, Samples: SortDurations(w), Style: st})
	}
	return handoffs, waits
}

func (v *view) waiting() {
	w := v.res.Plan.Waiting
	v.p("## 3. Waiting load: %s goroutines on %d clients blocked on one held lock\n\n", thousands(float64(w.Waiters)), w.Clients)
	v.p("Another client takes the lock and holds it; the waiters call `Lock`. After %v, what the waiters' clients send and what Redis executes are counted for %v. ", w.Warm, w.Dur)
	v.p("Redis's counts include the holder's renewals, if its library renews.\n\n")
	v.p("%s\n", v.waitingTable(v.names(func(t TargetInfo) bool { return t.Single })))
}

// waitingTable shows names' figures in scenario 3: what the waiters'
// clients sent and what Redis executed per second, and the grants that
// should not have happened.
func (v *view) waitingTable(names []string) *table {
	w := v.res.Plan.Waiting
	t := &table{head: []string{"target", "commands sent/s", "per waiter per second", "round trips/s", "Redis executed/s", "what Redis executed, per second", "grants while held"}}
	for _, n := range names {
		sent := Summarize(v.waitFig(n, func(r *WaitingResult) float64 { return float64(r.Window.Client.Commands) / r.Window.Elapsed.Seconds() }))
		var win Window
		for _, r := range v.res.Waiting {
			if r.Target == n && r.Err == "" {
				addWindow(&win, r.Window)
			}
		}
		breakdown := "–"
		if win.Elapsed > 0 {
			breakdown = FormatBreakdown(win.Server.Per(win.Elapsed.Seconds()), 0)
		}
		t.add(n, rate(sent), fmtFloat(3)(sent.Median/float64(w.Waiters)),
			rate(Summarize(v.waitFig(n, (*WaitingResult).RoundTripsPerSec))),
			rate(Summarize(v.waitFig(n, (*WaitingResult).CommandsPerSec))),
			breakdown,
			fmtFloat(0)(sum(v.waitFig(n, func(r *WaitingResult) float64 { return float64(r.Grants) }))))
	}
	return t
}

func (v *view) watchdog() {
	w := v.res.Plan.Watchdog
	v.p("## 4. Watchdog scale: %s leases held by one client with auto-renew\n\n", thousands(float64(w.Leases)))
	v.p("TTL %v (rueidislock: key validity %v). The leases are taken from 32 goroutines, then after %v the client's round trips, commands and CPU time (getrusage, user+system, the whole test process; redis-server is another process) are counted for %v. ", w.TTL, w.TTL, w.Warm, w.Dur)
	v.p("A period is the library's renewal interval: TTL/3 for dlock, TTL/2 for rueidislock, which renews each of a lock's three keys on its own.\n\n")
	t := &table{head: []string{"target", "renewal period", "renewals per lease per period", "round trips to renew every lease once",
		"round trips / period", "commands sent / period", "Redis executed / period", "client CPU / period", "CPU, share of one core", "leases lost", "taking them took"}}
	for _, n := range v.names(func(t TargetInfo) bool { return t.Renews && t.Single }) {
		period := "–"
		for _, r := range v.res.Watchdog {
			if r.Target == n {
				period = r.Period.String()
				break
			}
		}
		t.add(n, period,
			fmtSummary(Summarize(v.wdFig(n, (*WatchdogResult).RenewalsPerLease)), fmtFloat(2)),
			fmtSummary(Summarize(v.wdFig(n, (*WatchdogResult).RoundTripsPerPass)), roundTrips),
			fmtSummary(Summarize(v.wdFig(n, (*WatchdogResult).RoundTripsPerPeriod)), roundTrips),
			rate(Summarize(v.wdFig(n, (*WatchdogResult).CommandsPerPeriod))),
			rate(Summarize(v.wdFig(n, func(r *WatchdogResult) float64 { return float64(r.Window.Server.Total()) / r.Periods() }))),
			msS(Summarize(v.wdFig(n, func(r *WatchdogResult) float64 { return durMs(r.CPUPerPeriod()) }))),
			fmtSummary(Summarize(v.wdFig(n, func(r *WatchdogResult) float64 { return r.CPU.Seconds() / r.Window.Elapsed.Seconds() })), fmtPercent),
			fmtFloat(0)(sum(v.wdFig(n, func(r *WatchdogResult) float64 { return float64(r.Lost) }))),
			msS(Summarize(v.wdFig(n, func(r *WatchdogResult) float64 { return durMs(r.Acquire) }))))
	}
	v.p("%s\n", t)
	v.p("Round trips per period depend on where the window's edges fall between two renewal batches; round trips to renew every lease once (round trips ÷ (renewal commands ÷ leases)) do not. ")
	v.p("\"Leases lost\" counts unlocks that failed at the end (rueidislock's unlock cannot fail, so it shows 0 whatever happened).\n\n")
}
