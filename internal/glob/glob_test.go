package glob

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestMatchAgainstRedis checks Match and Escape against what
// the server's own matcher (KEYS, as SCAN's MATCH) says.
func TestMatchAgainstRedis(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	keys := []string{
		"a", "b", "ab", "abc", "aXc", "a}b", "{cart:7}:items", "x*y", "x?y", "x[y", `x\y`, "x]y",
		"orders:1", "orders:12", "orders:x", "-", "^", "a-z", "", "aaaaaaaaab", "caat", "ct",
	}
	for _, k := range keys {
		if k != "" {
			rdb.Set(ctx, k, "v", time.Minute)
		}
	}
	patterns := []string{
		"*", "a", "a*", "*b", "a?c", "?", "??", "a*c", "*a*a*a*b", "[ab]", "[^a]", "[a-b]", "[b-a]", "[^a-b]*",
		`x\*y`, `x\?y`, `x\[y`, `x\\y`, `x[\]]y`, "x[*]y", "[", "[a", "a[", `\`, `a\`, "orders:[0-9]", "orders:[0-9]*",
		"{cart:7}:*", "a}*", "c*a*t", "c**t", "[-]", "[a-]", "[^]", "*[", "a**", "**",
	}
	for _, p := range patterns {
		want := rdb.Keys(ctx, p).Val()
		sort.Strings(want)
		var got []string
		for _, k := range keys {
			if k != "" && Match(p, k) {
				got = append(got, k)
			}
		}
		sort.Strings(got)
		if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Errorf("Match(%q) matches %q; Redis matches %q", p, got, want)
		}
	}
	for _, k := range keys {
		if k == "" {
			continue
		}
		if got := rdb.Keys(ctx, Escape(k)).Val(); !slices.Equal(got, []string{k}) {
			t.Errorf("KEYS %q (Escape(%q)) = %q, want only the key itself", Escape(k), k, got)
		}
	}
	if Match("a", "") || !Match("", "") || Match("", "a") {
		t.Errorf("Match gets empty strings wrong")
	}
}
