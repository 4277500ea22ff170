package dlock

import (
	"fmt"
	"testing"
	"time"
)

// TestTimingsCache: the cached argument is the one the script parses, the
// same for a lock's options as for the Client's, and the cache stops
// growing at its bound while still answering.
func TestTimingsCache(t *testing.T) {
	var tc timingsCache
	for i := int64(0); i < 2*maxCachedTimings; i++ {
		k := timingsKey{3000, 10000 + i, 3600000}
		want := fmt.Sprintf("%d %d %d", k.waiterLease, k.claimWindow, k.fenceRetention)
		if got := tc.get(k); got != want {
			t.Fatalf("get(%v) = %q, want %q", k, got, want)
		}
		if got := tc.get(k); got != want {
			t.Fatalf("get(%v) again = %q, want %q", k, got, want)
		}
	}
	if n := len(*tc.m.Load()); n != maxCachedTimings {
		t.Errorf("cache holds %d entries, want %d", n, maxCachedTimings)
	}
}

// TestConfigSealedPerCallAsOnClient: a lock given options per call derives
// the same values as one whose Client was given them, and allocates no
// more for it.
func TestConfigSealedPerCallAsOnClient(t *testing.T) {
	opt := WithTTL(10 * time.Second)
	onClient := &Client{cfg: defaultConfig()}
	opt(&onClient.cfg)
	onClient.cfg.seal(&onClient.timings)
	perCall := &Client{cfg: defaultConfig()}
	perCall.cfg.seal(&perCall.timings)

	m := perCall.Mutex("x", opt)
	if m.err != nil {
		t.Fatal(m.err)
	}
	if m.cfg.timings != onClient.cfg.timings || m.cfg.pxMillis != onClient.cfg.pxMillis {
		t.Errorf("per call: timings %q, px %d; on the Client: %q, %d",
			m.cfg.timings, m.cfg.pxMillis, onClient.cfg.timings, onClient.cfg.pxMillis)
	}
	if want := "3000 3000 3600000"; m.cfg.timings != want {
		t.Errorf("timings %q, want %q", m.cfg.timings, want)
	}
	base := testing.AllocsPerRun(100, func() { _ = onClient.Mutex("x") })
	got := testing.AllocsPerRun(100, func() { _ = perCall.Mutex("x", opt) })
	if got > base {
		t.Errorf("Mutex with an option per call: %v allocations, with it on the Client: %v", got, base)
	}
}
