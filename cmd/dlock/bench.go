package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jedib0t/go-pretty/v6/progress"
	"github.com/jedib0t/go-pretty/v6/table"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/dlock-go/dlock"
)

// benchOptions are the flags of "dlock bench".
type benchOptions struct {
	duration   time.Duration
	clients    int
	goroutines int
	locks      int
	hold       time.Duration
	ttl        time.Duration // 0: the library's default
	progress   string        // auto, always, never
}

// maxBenchGoroutines bounds --goroutines and --clients.
const maxBenchGoroutines = 10000

func (a *app) benchCmd() *cobra.Command {
	o := &benchOptions{duration: 5 * time.Second, clients: 4, goroutines: 16, locks: 1, progress: "auto"}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure lock acquisitions per second and hand-off latency",
		Long: `bench has --goroutines goroutines, spread over --clients dlock clients (each
with its own connections, as separate processes would have), take and release
--locks locks in a loop for --duration: goroutine i uses lock i mod --locks,
so with the default single lock every goroutine contends for it. Each
acquisition holds the lock for --hold, then releases it.

At the end it prints a summary table:
  acquisitions/s    completed Lock + Unlock cycles per second, all goroutines
  acquire p50/p99   from calling Lock to holding the lock, waiting included
  hand-off p50/p99  from a holder's call to Unlock to the next holder's grant,
                    when that is another goroutine: how fast a release reaches
                    a waiter (through Redis, pub/sub and the waiting Lock)

A progress bar runs on stderr while it measures when stderr is a terminal
(--progress always or never to choose).

Without --redis or REDIS_URL it starts an embedded in-process Redis
(miniredis), which measures dlock and the client more than a server. Its
keys (<prefix>bench:<random id>:..., where <prefix> is --key-prefix,
"dlock:" by default) are deleted at the end.

Exit status: 0, 1 when Redis fails, 2 for invalid flags, 128+S when
signal S interrupts it (130 for Ctrl-C, 143 for SIGTERM).`,
		Example: `  dlock bench
  dlock bench --duration 30s --goroutines 64 --clients 8 --locks 4
  dlock bench --redis redis://127.0.0.1:6379 --hold 1ms`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.bench(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.duration, "duration", o.duration, "how long to measure")
	f.IntVar(&o.clients, "clients", o.clients, "number of dlock clients, each with its own connections")
	f.IntVar(&o.goroutines, "goroutines", o.goroutines, "number of goroutines taking locks, spread over the clients")
	f.IntVar(&o.locks, "locks", o.locks, "number of distinct locks; goroutines beyond that contend")
	f.DurationVar(&o.hold, "hold", o.hold, "how long each acquisition holds the lock")
	f.DurationVar(&o.ttl, "ttl", o.ttl, "lock TTL (0: the library's default)")
	f.StringVar(&o.progress, "progress", o.progress, "show a progress bar on stderr: auto (when a terminal), always or never")
	return cmd
}

func (o *benchOptions) validate() error {
	switch {
	case o.duration <= 0:
		return usageErrorf("--duration must be positive, got %v", o.duration)
	case o.clients < 1 || o.clients > maxBenchGoroutines:
		return usageErrorf("--clients must be between 1 and %d, got %d", maxBenchGoroutines, o.clients)
	case o.goroutines < 1 || o.goroutines > maxBenchGoroutines:
		return usageErrorf("--goroutines must be between 1 and %d, got %d", maxBenchGoroutines, o.goroutines)
	case o.locks < 1 || o.locks > o.goroutines:
		return usageErrorf("--locks must be between 1 and --goroutines (%d), got %d", o.goroutines, o.locks)
	case o.hold < 0:
		return usageErrorf("--hold must not be negative, got %v", o.hold)
	case o.ttl != 0 && (o.ttl < dlock.MinTTL || o.ttl > dlock.MaxTTL):
		return usageErrorf("--ttl must be 0 (the library's default) or between %v and %v, got %v", dlock.MinTTL, dlock.MaxTTL, o.ttl)
	case o.progress != "auto" && o.progress != "always" && o.progress != "never":
		return usageErrorf("--progress must be auto, always or never, got %q", o.progress)
	}
	return nil
}

// benchWorker is what one goroutine measured; only it writes to it.
type benchWorker struct {
	acquireWaits []time.Duration
	handoffs     []time.Duration
	err          error
}

// lastRelease is when a lock was last released, and by which goroutine: a
// grant to another goroutine after it was a hand-off.
type lastRelease struct {
	mu sync.Mutex
	at time.Time
	by int
}

func (a *app) bench(ctx context.Context, o *benchOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	t, err := a.conn.open(ctx, true)
	if err != nil {
		return err
	}
	defer t.Close()
	id, err := randomID()
	if err != nil {
		return err
	}
	prefix := a.keyPrefix + "bench:" + id + ":"
	admin := t.newClient()
	defer admin.Close()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if err := deleteByPrefix(cctx, admin, prefix); err != nil {
			fmt.Fprintf(a.stderr, "dlock: warning: could not delete the benchmark's keys %s*: %v (they expire within an hour)\n", prefix, err)
		}
	}()

	clients, closeClients, err := benchClients(t, o, prefix)
	defer closeClients()
	if err != nil {
		return err
	}

	workers := make([]benchWorker, o.goroutines)
	releases := make([]lastRelease, o.locks)
	var acquisitions atomic.Int64
	runCtx, stop := context.WithTimeout(ctx, o.duration)
	defer stop()
	bar := a.startProgress(o, &acquisitions)
	start := time.Now()
	var wg sync.WaitGroup
	for g := 0; g < o.goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			w := &workers[g]
			w.err = benchLoop(runCtx, ctx, clients[g%o.clients], g, fmt.Sprintf("lock-%d", g%o.locks), &releases[g%o.locks], o.hold, w, &acquisitions)
			if w.err != nil {
				stop() // the first failure ends the run
			}
		}(g)
	}
	wg.Wait()
	elapsed := time.Since(start)
	bar.stop()

	var failed error
	var waits, handoffs []time.Duration
	for _, w := range workers {
		waits = append(waits, w.acquireWaits...)
		handoffs = append(handoffs, w.handoffs...)
		if w.err != nil && failed == nil {
			failed = w.err
		}
	}
	if ctx.Err() != nil {
		// The cause says which signal: "interrupted by SIGINT".
		return fmt.Errorf("the benchmark stopped after %v: %w", elapsed.Round(time.Millisecond), context.Cause(ctx))
	}
	a.benchSummary(t, o, elapsed, acquisitions.Load(), waits, handoffs)
	if failed != nil {
		return fmt.Errorf("the benchmark stopped at its first failure: %w", failed)
	}
	return nil
}

// benchClients opens o.clients Clients, each on connections of its own, as
// separate processes would have. closeAll closes what was opened, even
// when err is set.
func benchClients(t *target, o *benchOptions, prefix string) (clients []*dlock.Client, closeAll func(), err error) {
	opts := []dlock.Option{dlock.WithKeyPrefix(prefix), dlock.WithOwnerInfo("dlock bench")}
	if o.ttl != 0 {
		opts = append(opts, dlock.WithTTL(o.ttl))
	}
	rdbs := make([]redis.UniversalClient, o.clients)
	clients = make([]*dlock.Client, o.clients)
	closeAll = func() {
		for i := range rdbs {
			if clients[i] != nil {
				clients[i].Close()
			}
			if rdbs[i] != nil {
				rdbs[i].Close()
			}
		}
	}
	for i := range rdbs {
		rdbs[i] = t.newClient()
		if clients[i], err = dlock.New(rdbs[i], opts...); err != nil {
			return clients, closeAll, err
		}
	}
	return clients, closeAll, nil
}

// benchLoop takes and releases one lock until runCtx ends, recording into w.
// Releases run under ctx, so the last one completes after runCtx ended.
func benchLoop(runCtx, ctx context.Context, c *dlock.Client, g int, name string, last *lastRelease, hold time.Duration, w *benchWorker, total *atomic.Int64) error {
	mu := c.Mutex(name)
	for runCtx.Err() == nil {
		asked := time.Now()
		l, err := mu.Lock(runCtx)
		if err != nil {
			if runCtx.Err() != nil && errors.Is(err, dlock.ErrNotObtained) {
				return nil // the run is over
			}
			return err
		}
		granted := time.Now()
		w.acquireWaits = append(w.acquireWaits, granted.Sub(asked))
		last.mu.Lock()
		if !last.at.IsZero() && last.by != g {
			w.handoffs = append(w.handoffs, granted.Sub(last.at))
		}
		last.mu.Unlock()
		if hold > 0 {
			time.Sleep(hold)
		}
		// Recorded before Unlock: the next holder's grant can only follow it.
		last.mu.Lock()
		last.at, last.by = time.Now(), g
		last.mu.Unlock()
		if err := l.Unlock(ctx); err != nil {
			return err
		}
		total.Add(1)
	}
	return nil
}

// benchProgress is the progress bar of a run, if one is shown.
type benchProgress struct {
	pw      progress.Writer
	tracker *progress.Tracker
	quit    chan struct{}
	done    chan struct{}
}

// startProgress shows a progress bar on stderr, as o.progress says, which
// tracks the run's time and counts its acquisitions.
func (a *app) startProgress(o *benchOptions, acquisitions *atomic.Int64) *benchProgress {
	show := o.progress == "always"
	if o.progress == "auto" {
		f, ok := a.stderr.(*os.File)
		show = ok && term.IsTerminal(int(f.Fd()))
	}
	if !show {
		return nil
	}
	pw := progress.NewWriter()
	pw.SetOutputWriter(a.stderr)
	pw.SetAutoStop(true)
	pw.SetUpdateFrequency(100 * time.Millisecond)
	pw.SetMessageLength(40)
	pw.SetTrackerLength(30)
	pw.Style().Visibility.Value = false
	pw.Style().Visibility.ETA = true
	tracker := &progress.Tracker{Message: "benchmarking", Total: o.duration.Milliseconds()}
	pw.AppendTracker(tracker)
	p := &benchProgress{pw: pw, tracker: tracker, quit: make(chan struct{}), done: make(chan struct{})}
	rendered := make(chan struct{})
	go func() {
		defer close(rendered)
		pw.Render()
	}()
	go func() {
		defer close(p.done)
		start := time.Now()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				elapsed := time.Since(start)
				n := acquisitions.Load()
				tracker.UpdateMessage(fmt.Sprintf("%d acquisitions, %.0f/s", n, float64(n)/elapsed.Seconds()))
				if v := elapsed.Milliseconds(); v < tracker.Total {
					tracker.SetValue(v)
				}
			case <-p.quit:
				tracker.MarkAsDone()
				<-rendered // autostop ends Render once the tracker is done
				return
			}
		}
	}()
	return p
}

// stop completes the bar and waits until it is drawn.
func (p *benchProgress) stop() {
	if p == nil {
		return
	}
	close(p.quit)
	<-p.done
}

// benchSummary prints the results.
func (a *app) benchSummary(t *target, o *benchOptions, elapsed time.Duration, n int64, waits, handoffs []time.Duration) {
	tw := table.NewWriter()
	tw.SetStyle(table.StyleLight)
	tw.SetTitle("dlock bench")
	tw.AppendRows([]table.Row{
		{"target", t.desc},
		{"clients", o.clients},
		{"goroutines", fmt.Sprintf("%d (%s per lock)", o.goroutines, perLock(o))},
		{"locks", o.locks},
		{"hold", o.hold},
		{"duration", formatDuration(elapsed)},
		{"acquisitions", n},
		{"acquisitions/s", fmt.Sprintf("%.0f", float64(n)/elapsed.Seconds())},
		{"acquire p50", formatDuration(percentile(waits, 0.50))},
		{"acquire p99", formatDuration(percentile(waits, 0.99))},
		{"hand-offs", len(handoffs)},
		{"hand-off p50", durationOrNone(handoffs, 0.50)},
		{"hand-off p99", durationOrNone(handoffs, 0.99)},
	})
	fmt.Fprintln(a.stdout, tw.Render())
}

func perLock(o *benchOptions) string {
	if o.goroutines%o.locks == 0 {
		return fmt.Sprint(o.goroutines / o.locks)
	}
	return fmt.Sprintf("%d-%d", o.goroutines/o.locks, o.goroutines/o.locks+1)
}

func durationOrNone(ds []time.Duration, p float64) string {
	if len(ds) == 0 {
		return "-"
	}
	return formatDuration(percentile(ds, p))
}
