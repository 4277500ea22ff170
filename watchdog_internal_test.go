package dlock

import (
	"context"
	"testing"
)

// A stream of short holds must not wake the watchdog's loop once per
// acquisition: each new lease is due after the loop's own next wake-up.
func TestShortHoldsLeaveTheWatchdogAsleep(t *testing.T) {
	c := sharedClient(t)
	ctx := context.Background()
	m := c.Mutex(t.Name())
	const holds = 200
	for i := 0; i < holds; i++ {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The first lease, or one tracked just as the loop found nothing to
	// watch, may wake it; one wake-up per hold is what this guards against.
	if n := c.wd.pokes.Load(); n > holds/10 {
		t.Errorf("the watchdog's loop was woken %d times for %d short holds, want at most %d", n, holds, holds/10)
	}
}
