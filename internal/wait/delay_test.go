package wait

import (
	"testing"
	"time"
)

func TestSpinDelayGrowsWithJitterWithinBounds(t *testing.T) {
	s := NewSpin(2*time.Millisecond, 50*time.Millisecond)
	step := 2 * time.Millisecond
	for i := 0; i < 20; i++ {
		d := s.Next()
		if d < step/2 || d > step {
			t.Fatalf("delay %d = %v, want within [%v, %v]", i, d, step/2, step)
		}
		if step *= 2; step > 50*time.Millisecond {
			step = 50 * time.Millisecond
		}
	}
}

func TestPollDelay(t *testing.T) {
	cfg := &Settings{Refresh: time.Second} // a waiter lease of 3s
	cases := []struct {
		holderTTL time.Duration
		min, max  time.Duration
	}{
		{30 * time.Second, time.Second, 1100 * time.Millisecond},                 // refresh before the lease ends
		{200 * time.Millisecond, 201 * time.Millisecond, 222 * time.Millisecond}, // look when the holder's key expires
		{0, time.Second, 1100 * time.Millisecond},
	}
	for _, tc := range cases {
		for i := 0; i < 100; i++ {
			if d := cfg.pollDelay(tc.holderTTL, nil); d < tc.min || d > tc.max {
				t.Fatalf("pollDelay(holder %v) = %v, want within [%v, %v]", tc.holderTTL, d, tc.min, tc.max)
			}
		}
	}
	spin := NewSpin(time.Minute, time.Minute)
	if d := cfg.pollDelay(0, spin); d != time.Second {
		t.Errorf("a spin delay longer than the lease refresh: got %v, want the refresh (1s)", d)
	}
	if (&Settings{}).newSpin() != nil {
		t.Error("waiting by pub/sub has no spin delay")
	}
}
