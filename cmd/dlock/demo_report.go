package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// report prints both runs side by side.
func (d *demoRun) report(w io.Writer, unlocked, locked *phaseResult) error {
	items := d.opts.items
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	row := func(name, a, b string) { fmt.Fprintf(tw, "%s\t%s\t%s\n", name, a, b) }
	row("", "no lock", "dlock")
	row("sales", fmt.Sprint(unlocked.sales.Load()), fmt.Sprint(locked.sales.Load()))
	row("oversold", fmt.Sprint(unlocked.oversold(items)), fmt.Sprint(locked.oversold(items)))
	row("final stock", fmt.Sprint(unlocked.finalStock), fmt.Sprint(locked.finalStock))
	row("elapsed", formatDuration(unlocked.elapsed), formatDuration(locked.elapsed))
	row("throughput", throughput(unlocked), throughput(locked))
	row("lock wait p50", "-", formatDuration(percentile(locked.waits, 0.50)))
	row("lock wait p99", "-", formatDuration(percentile(locked.waits, 0.99)))
	row("leases lost", "-", fmt.Sprint(locked.lostLeases))
	row("fencing tokens", "-", tokenSummary(locked))
	return tw.Flush()
}

// check prints the verdict, and fails when the locked run did not sell
// every item exactly once.
func (d *demoRun) check(w io.Writer, unlocked, locked *phaseResult) error {
	o := d.opts
	fmt.Fprintln(w)
	if over := unlocked.oversold(o.items); over > 0 {
		fmt.Fprintf(w, "Without a lock, %d workers sold %d items from a stock of %d: %d oversold, because\n"+
			"they read the stock before the others had written it back.\n", o.workers, unlocked.sales.Load(), o.items, over)
	} else {
		fmt.Fprintf(w, "Without a lock nothing was oversold this time; the race is still there: try more\n"+
			"--workers or a longer --work.\n")
	}

	var problems []string
	if over := locked.oversold(o.items); over != 0 || locked.finalStock != 0 {
		problems = append(problems, fmt.Sprintf("it sold %d items from a stock of %d (%d oversold) and left a stock of %d",
			locked.sales.Load(), o.items, over, locked.finalStock))
	}
	if !locked.tokensIncrease() {
		problems = append(problems, "its fencing tokens did not strictly increase in grant order")
	}
	if locked.lostLeases > 0 {
		fmt.Fprintf(w, "With dlock, %s lost while held; a sale in progress then stopped without writing.\n"+
			"The first loss: %v\n", plural(locked.lostLeases, "lease was", "leases were"), locked.firstLoss)
	}
	if len(problems) == 0 {
		fmt.Fprintf(w, "With dlock, every item was sold exactly once.\n")
		return nil
	}
	msg := "the run with dlock failed: " + joinProblems(problems)
	if locked.lostLeases > 0 {
		msg += fmt.Sprintf("; %s lost while held (the first: %v)", plural(locked.lostLeases, "lease was", "leases were"), locked.firstLoss)
	}
	msg += "; the lock did not keep the workers apart, which is a bug in dlock or in the Redis server: please report it"
	return errors.New(msg)
}

// plural returns "1 <one>" or "<n> <many>".
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func joinProblems(p []string) string {
	s := p[0]
	for _, q := range p[1:] {
		s += ", and " + q
	}
	return s
}

func tokenSummary(r *phaseResult) string {
	if len(r.tokens) == 0 {
		return "none"
	}
	order := "strictly increasing"
	if !r.tokensIncrease() {
		order = "NOT strictly increasing"
	}
	return fmt.Sprintf("%d..%d (%d grants, %s)", slices.Min(r.tokens), slices.Max(r.tokens), len(r.tokens), order)
}

func throughput(r *phaseResult) string {
	if r.elapsed <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f sales/s", float64(r.sales.Load())/r.elapsed.Seconds())
}

// percentile returns the nearest-rank percentile p (0 < p <= 1) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

// formatDuration rounds d to three significant digits or so, for a table.
func formatDuration(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	case d >= 10*time.Microsecond:
		return d.Round(time.Microsecond).String()
	}
	return d.String()
}

// phaseResult is what one run of the race measured. Workers record into it
// concurrently through its methods; the fields are read once they are done.
type phaseResult struct {
	sales      atomic.Int64
	finalStock int64
	elapsed    time.Duration

	// The locked run only; guarded by mu while the workers run.
	mu         sync.Mutex
	waits      []time.Duration // from each Lock call to its grant
	tokens     []int64         // fencing tokens, in the order workers got the lock
	lostLeases int64           // leases lost while held
	firstLoss  error           // why the first of them was lost
	latestLoss error           // and the latest
}

// granted records a grant. Workers call it as soon as they hold the lock,
// so, while the lock keeps them apart, calls come in grant order.
func (r *phaseResult) granted(token int64, waited time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tokens = append(r.tokens, token)
	r.waits = append(r.waits, waited)
}

// lost records a lease lost while held.
func (r *phaseResult) lost(reason error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lostLeases++
	r.latestLoss = reason
	if r.firstLoss == nil {
		r.firstLoss = reason
	}
}

// lastLoss returns why the last lost lease was lost.
func (r *phaseResult) lastLoss() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.latestLoss
}

func (r *phaseResult) oversold(items int) int64 { return r.sales.Load() - int64(items) }

// tokensIncrease reports whether the fencing tokens strictly increase in
// grant order.
func (r *phaseResult) tokensIncrease() bool {
	for i := 1; i < len(r.tokens); i++ {
		if r.tokens[i] <= r.tokens[i-1] {
			return false
		}
	}
	return true
}
