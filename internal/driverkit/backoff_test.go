package driverkit

import (
	"testing"
	"time"
)

func TestBackoffDoublesUpToMost(t *testing.T) {
	for _, tc := range []struct {
		b    Backoff
		want []time.Duration // in ms
	}{
		{Backoff{First: 5 * time.Millisecond, Most: 200 * time.Millisecond}, []time.Duration{5, 10, 20, 40, 80, 160, 200, 200}},
		{reconnectBackoff(), []time.Duration{10, 20, 40, 80, 160, 320, 640, 1000, 1000}},
	} {
		b := tc.b
		for i, w := range tc.want {
			if got := b.Next(); got != w*time.Millisecond {
				t.Errorf("%v..%v: delay %d = %v, want %v", tc.b.First, tc.b.Most, i, got, w*time.Millisecond)
			}
		}
		b.Reset()
		if got := b.Next(); got != tc.b.First {
			t.Errorf("%v..%v: after Reset %v, want %v", tc.b.First, tc.b.Most, got, tc.b.First)
		}
	}
}
