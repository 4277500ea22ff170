package goredis

import (
	"testing"
	"time"
)

func TestTryAgainPausesDoubleUpTo200ms(t *testing.T) {
	want := []time.Duration{5, 10, 20, 40, 80, 160, 200, 200, 200}
	for round, w := range want {
		if got := tryAgainPause(round); got != w*time.Millisecond {
			t.Errorf("pause %d = %v, want %v", round, got, w*time.Millisecond)
		}
	}
	if got := tryAgainPause(maxRedirects); got != 200*time.Millisecond {
		t.Errorf("pause %d = %v, want 200ms", maxRedirects, got)
	}
}
