package notify

import (
	"log/slog"
	"testing"
)

// FuzzGrantMessage feeds the notifier's parser arbitrary pub/sub payloads.
func FuzzGrantMessage(f *testing.F) {
	for _, s := range []string{"1 3000 5 owner", "7 1 0 o", "7 0 5 o", "x 1 5 o", "zero", "", "1 -5 5 o", "9223372036854775807 1 5 o", "1 9223372036854775807 5 o", "1 1 -1 o", "1 3000 owner"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		g, owner, ok := ParseGrant(payload)
		if ok && (g.PX <= 0 || owner == "" || g.AtUs < 0) {
			t.Fatalf("ParseGrant(%q) = %+v, %q: accepted a grant without a claim window, time or owner", payload, g, owner)
		}
		n := New(nil, slog.Default())
		n.Message("ch", payload) // no waiter: nothing to deliver, nothing to panic
	})
}
