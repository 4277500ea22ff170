package bench

import (
	"context"
	"testing"
	"time"
)

// napper is a stall probe's sleep on a fake clock: each call advances the
// clock by the next of naps, and the last one ends the probe.
func napper(clock *int64, cancel func(), naps ...time.Duration) func(time.Duration) {
	return func(time.Duration) {
		*clock += int64(naps[0])
		if naps = naps[1:]; len(naps) == 0 {
			cancel()
		}
	}
}

func TestProbeStallsReportsTheLongestLateWakeUpInTheWindow(t *testing.T) {
	ms := int64(time.Millisecond)
	for _, c := range []struct {
		name   string
		t0, t1 int64
		want   time.Duration
	}{
		{"window open", 1, 0, 30 * time.Millisecond},
		{"the long nap before the window", 3 * ms, 0, 4 * time.Millisecond},
		{"the long nap after the window", 1, 2 * ms, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			clock := int64(1)
			sleep := napper(&clock, cancel, time.Millisecond, 31*time.Millisecond, 5*time.Millisecond, time.Millisecond)
			got := probeStalls(ctx, func() int64 { return clock }, func() int64 { return c.t0 }, func() int64 { return c.t1 }, sleep)
			if got != c.want {
				t.Errorf("probeStalls = %v, want %v", got, c.want)
			}
		})
	}
}
