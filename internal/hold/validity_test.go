package hold

import (
	"testing"
	"time"
)

func TestValidityAndRenewalSchedule(t *testing.T) {
	base := time.Now()
	cases := []struct {
		name       string
		ttl, px    time.Duration
		autoRenew  bool
		maxHold    time.Duration
		wantValid  time.Duration // validUntil - from
		wantRenew  time.Duration // nextRenew - from; -1 for none
		wantCapped bool
	}{
		{"full grant renews at a third", 30 * time.Second, 30 * time.Second, true, 0, 30*time.Second - 302*time.Millisecond, 10 * time.Second, false},
		{"claim window renews at a third of it", 30 * time.Second, 3 * time.Second, true, 0, 3*time.Second - 32*time.Millisecond, time.Second, false},
		{"no auto-renew", 30 * time.Second, 30 * time.Second, false, 0, 30*time.Second - 302*time.Millisecond, -1, false},
		{"grant reaching the hold cap", 30 * time.Second, 5 * time.Second, true, 5 * time.Second, 5*time.Second - 52*time.Millisecond, -1, true},
	}
	for _, c := range cases {
		l := &Lease{host: testHost{}, ttl: c.ttl, autoRenew: c.autoRenew}
		if c.maxHold > 0 {
			l.holdUntil = base.Add(c.maxHold)
		}
		l.applyValidityLocked(base, c.px)
		if got := l.validUntil.Sub(base); got != c.wantValid {
			t.Errorf("%s: validity %v, want %v", c.name, got, c.wantValid)
		}
		gotRenew := time.Duration(-1)
		if !l.nextRenew.IsZero() {
			gotRenew = l.nextRenew.Sub(base)
		}
		if gotRenew != c.wantRenew {
			t.Errorf("%s: next renewal at %v, want %v", c.name, gotRenew, c.wantRenew)
		}
		if l.capped != c.wantCapped {
			t.Errorf("%s: capped %v, want %v", c.name, l.capped, c.wantCapped)
		}
	}
	// An older result never overwrites a newer one.
	l := &Lease{host: testHost{}, ttl: time.Second, autoRenew: true}
	l.applyValidityLocked(base.Add(time.Second), time.Second)
	l.applyValidityLocked(base, 10*time.Second)
	if l.validFrom != base.Add(time.Second) {
		t.Error("a stale renewal overwrote a newer validity")
	}
}

// testHost is a Host whose lock needs nothing more than the default drift.
type testHost struct{}

func (testHost) Holder() Holder                   { return nil }
func (testHost) Name() string                     { return "test" }
func (testHost) Lost(error, string)               {}
func (testHost) Renewed(error)                    {}
func (testHost) RenewFailed(error, time.Duration) {}
