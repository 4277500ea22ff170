package bench

import (
	"context"
	"time"
)

// stallTick is how often the stall probe asks to be woken.
const stallTick = time.Millisecond

// probeStalls sleeps stallTick at a time until ctx ends and returns the
// longest a wake-up came late, counting only wake-ups inside the window
// [t0, t1) that t0 and t1 give once set (0 while unset). now is the run's
// clock in ns. A late wake-up is a time when this process, or the machine,
// ran none of its goroutines on time, whoever held the lock then: a wait
// that spans one is long whatever the library does. sleepFor is
// time.Sleep outside tests.
func probeStalls(ctx context.Context, now func() int64, t0, t1 func() int64, sleepFor func(time.Duration)) time.Duration {
	var worst time.Duration
	for ctx.Err() == nil {
		before := now()
		sleepFor(stallTick)
		after := now()
		start, end := t0(), t1()
		if start == 0 || before < start || (end > 0 && after > end) {
			continue
		}
		worst = max(worst, time.Duration(after-before)-stallTick)
	}
	return worst
}
