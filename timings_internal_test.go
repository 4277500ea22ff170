package dlock

import (
	"testing"
	"time"
)

// TestConfigSealedPerCallAsOnClient: a lock given options per call derives
// the same values as one whose Client was given them, and allocates no
// more for it.
func TestConfigSealedPerCallAsOnClient(t *testing.T) {
	opt := WithTTL(10 * time.Second)
	onClient := &Client{cfg: defaultConfig()}
	opt(&onClient.cfg)
	onClient.cfg.seal(nil)
	perCall := &Client{cfg: defaultConfig()}
	perCall.cfg.seal(nil)

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
	long := perCall.Mutex("x", WithTTL(time.Hour)) // a fence retention of its own
	if want := "3000 3000 7200000"; long.cfg.timings != want {
		t.Errorf("timings with a 1h TTL %q, want %q", long.cfg.timings, want)
	}
	base := testing.AllocsPerRun(100, func() { _ = onClient.Mutex("x") })
	got := testing.AllocsPerRun(100, func() { _ = perCall.Mutex("x", opt) })
	if got > base {
		t.Errorf("Mutex with an option per call: %v allocations, with it on the Client: %v", got, base)
	}
}
