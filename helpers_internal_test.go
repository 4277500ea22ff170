package dlock

import (
	"testing"
	"time"
)

// waitFor polls cond (a state observed from outside, such as a server's
// keys or subscriptions) until it holds, failing t after limit. limit
// bounds a hang: a loaded machine may take seconds where an idle one takes
// milliseconds.
func waitFor(t testing.TB, limit time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
