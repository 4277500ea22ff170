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
