package bench

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

var sweep = flag.Bool("sweep", false, "run the contended scenario for the peers at several retry intervals (how TightRetry was chosen)")

// TestSweepRetry runs scenario 2 for redsync and redislock at several fixed
// retry intervals and logs the figures. TightRetry is the interval chosen
// from it. It runs only with -sweep.
func TestSweepRetry(t *testing.T) {
	if !*sweep {
		t.Skip("slow; run with -args -sweep")
	}
	srv := NewServers(redistest.Start(t).Addr())
	defer srv.Close()
	spec := DefaultPlan().Scale(*scale).Contended
	ctx := context.Background()
	delays := []time.Duration{500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond}
	for rep := 0; rep < 3; rep++ {
		for _, d := range delays {
			for _, tg := range []Target{
				{Name: fmt.Sprintf("redsync-%v", d), New: newRedsync(d)},
				{Name: fmt.Sprintf("redislock-%v", d), New: newRedislock(d)},
			} {
				r, err := RunContended(ctx, tg, srv, spec)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("rep %d %-18s %7.0f acq/s  hand-off p50 %8v p99 %8v  barging %3.0f%%  worst p99 %8v max wait %8v  %.1f cmds/acq",
					rep+1, tg.Name, r.AcqPerSec(), r.HandoffQuantile(0.5).Round(time.Microsecond), r.HandoffQuantile(0.99).Round(time.Microsecond),
					100*r.BargingShare(), r.WorstP99().Round(time.Microsecond), r.MaxWait().Round(time.Microsecond),
					float64(r.Window.Client.Commands)/float64(r.Grants))
			}
		}
	}
}
