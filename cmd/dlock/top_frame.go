package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jedib0t/go-pretty/v6/table"

	"github.com/dlock-go/dlock"
)

// rowKey names one row of "dlock top": a kind of lock under a name.
type rowKey struct {
	name string
	kind dlock.Kind
}

// topRow is one lock in a frame; rate is its grants per second over the
// last interval, negative when unknown (the first frame).
type topRow struct {
	info dlock.LockInfo
	rate float64
}

// topFrame is what one refresh of "dlock top" read.
type topFrame struct {
	at   time.Time
	rows []topRow
}

// topSort is an order of a frame's rows.
type topSort int

const (
	sortWait    topSort = iota // longest wait, then most waiters
	sortWaiters                // most waiters, then longest wait
	sortHeld                   // longest held
	sortRate                   // most grants per second
	sortName                   // by name
)

var sortNames = map[topSort]string{
	sortWait: "longest wait", sortWaiters: "most waiters", sortHeld: "held for",
	sortRate: "grants/s", sortName: "name",
}

// sortBy orders the rows by by, then by name and kind.
func (f *topFrame) sortBy(by topSort) {
	sort.SliceStable(f.rows, func(i, j int) bool {
		a, b := &f.rows[i], &f.rows[j]
		wa, wb := longestWait(a.info), longestWait(b.info)
		na, nb := len(a.info.Waiters), len(b.info.Waiters)
		switch by {
		case sortWait:
			if wa != wb {
				return wa > wb
			}
			if na != nb {
				return na > nb
			}
		case sortWaiters:
			if na != nb {
				return na > nb
			}
			if wa != wb {
				return wa > wb
			}
		case sortHeld:
			if ha, hb := longestHold(a.info), longestHold(b.info); ha != hb {
				return ha > hb
			}
		case sortRate:
			if a.rate != b.rate {
				return a.rate > b.rate
			}
		}
		if a.info.Name != b.info.Name {
			return a.info.Name < b.info.Name
		}
		return a.info.Kind < b.info.Kind
	})
}

// render returns the frame as a table, keeping the rows whose name
// contains filter.
func (f *topFrame) render(filter string) string {
	t := newTable()
	t.AppendHeader(table.Row{"kind", "name", "holder", "held for", "ttl", "waiters", "longest wait", "grants/s"})
	shown := 0
	for _, r := range f.rows {
		if !strings.Contains(r.info.Name, filter) {
			continue
		}
		shown++
		waiters := fmt.Sprint(len(r.info.Waiters))
		if r.info.Kind == dlock.KindLatch {
			waiters = "-"
		}
		t.AppendRow(table.Row{r.info.Kind, r.info.Name, holdersSummary(r.info), formatTTL(longestHold(r.info)),
			formatTTL(soonestTTL(r.info)), waiters, formatTTL(longestWait(r.info)), formatRate(r.rate)})
		appendWaiters(t, r.info.Waiters)
	}
	if shown == 0 {
		return "no locks held or waited for\n"
	}
	return t.Render() + "\n"
}

// topWaitersShown is how many waiters of one lock a frame lists.
const topWaitersShown = 3

// appendWaiters adds a line per waiter under its lock's row: who, and how
// long it has waited.
func appendWaiters(t table.Writer, ws []dlock.Waiter) {
	for i, w := range ws {
		if i == topWaitersShown {
			t.AppendRow(table.Row{"", fmt.Sprintf("  ... %d more waiting", len(ws)-i)})
			return
		}
		t.AppendRow(table.Row{"", fmt.Sprintf("  waiter %d", w.Position), ownerLabel(w.Owner, w.Info), "", "", "",
			formatTTL(w.WaitedFor), ""})
	}
}

// formatRate shows grants per second, "-" when unknown.
func formatRate(r float64) string {
	if r < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", r)
}
