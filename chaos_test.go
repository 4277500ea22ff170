//go:build linux

package dlock_test

// The fault-injection suite's machinery: workers that take locks and record
// what they believed (chaos_worker_test.go), in this process or in child
// processes that re-run this test binary (chaos_child_test.go); go-redis
// hooks that record script calls and a prober of keys
// (chaos_hook_test.go); mutants (chaos_mutant_test.go); and assertions over
// the recorded history. The scenarios are in the other chaos_*_test.go
// files; the history types and checkers in internal/chaos; what is
// measured and why in docs/reliability.md.
//
// Two tiers: by default (make test) every scenario runs a few trials with
// generous timing bounds; DLOCK_CHAOS=long (make chaos) runs the trial
// counts of docs/reliability.md and publishes the figures.

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/chaos"
)

// chaosSpec tells a worker what to do. It travels to child workers as JSON
// in chaosSpecEnv.
type chaosSpec struct {
	Proc string `json:"proc"` // names the worker in events
	// Kind is what a section does: take a "mutex" (default), a "fair"
	// mutex, a "reentrant" mutex (then lock it again once or twice, see
	// reenter), an "rwmutex" (for reading or writing, see Reads), a
	// "redlock" or one permit of a "semaphore"; or, on the latch named by
	// Locks[0], "latch-wait" (Wait) or "latch-countdown" (CountDown after a
	// random delay of up to Hold).
	Kind  string   `json:"kind,omitempty"`
	Addrs []string `json:"addrs"` // the lock's Redis: one address, or every Redlock node
	// StoreAddr is the server of the counters and the fenced store; empty
	// means Addrs[0].
	StoreAddr string        `json:"store,omitempty"`
	Locks     []string      `json:"locks"` // each section picks one at random
	TTL       time.Duration `json:"ttl"`
	NoRenew   bool          `json:"norenew,omitempty"`
	// WaiterLease is the lock client's WithWaiterLease (0: default).
	WaiterLease time.Duration `json:"waiterlease,omitempty"`
	// Permits is a semaphore's limit; each section takes one permit.
	Permits int `json:"permits,omitempty"`
	// Reads is the percentage of an rwmutex's sections that read (RLock);
	// the others write (Lock). Only writers touch the counters.
	Reads int `json:"reads,omitempty"`
	// Sections is how many critical sections each goroutine runs.
	Sections   int `json:"sections"`
	Goroutines int `json:"goroutines,omitempty"` // default 1
	// Hold is how long a section lasts; within it the worker records Held
	// (and, with Fenced, writes the fenced store) every Beat.
	Hold time.Duration `json:"hold,omitempty"`
	Beat time.Duration `json:"beat,omitempty"`
	// StopOnLoss ends a section as soon as the lease's Done closes.
	StopOnLoss bool `json:"stoponloss,omitempty"`
	// Counter increments an unfenced counter per lock once per section
	// (GET then SET): lost updates show mutual exclusion failing.
	Counter bool `json:"counter,omitempty"`
	// Fenced increments a fenced counter per lock (fence.Store.Update) at
	// every beat.
	Fenced bool `json:"fenced,omitempty"`
	// Try polls with TryLock every Spin instead of waiting in Lock.
	Try  bool          `json:"try,omitempty"`
	Spin time.Duration `json:"spin,omitempty"`
	// LockTimeout bounds each acquisition; default 30s.
	LockTimeout time.Duration `json:"locktimeout,omitempty"`
	// Hooks records every script call of the lock's client (Cmd events).
	Hooks bool `json:"hooks,omitempty"`
	// ReadTimeout is the lock clients' go-redis read timeout (0: default).
	ReadTimeout time.Duration `json:"readtimeout,omitempty"`
	// Warm takes and releases another lock first (see warm).
	Warm bool `json:"warm,omitempty"`
	// HoldRand draws each section's hold uniformly from [Hold/2, Hold].
	HoldRand bool `json:"holdrand,omitempty"`
	// Mutant names the broken variant a child worker installs (see
	// chaosMutants); in-process workers run whatever the test installed.
	Mutant string `json:"mutant,omitempty"`
	Seed   int64  `json:"seed"`

	// In-process only: a section also ends when until is closed.
	until <-chan struct{}
	// In-process only: called with each granted lease, before its section.
	onLease func(*dlock.Lease)
	// In-process only: called after a lease's loss was recorded.
	onLost func()
}

// chaosCounterKey is the key of lock name's unfenced counter, and
// chaosFencedKey that of its fenced one. They are outside dlock's prefix.
func chaosCounterKey(name string) string { return "chaos:{" + name + "}:counter" }
func chaosFencedKey(name string) string  { return "chaos:{" + name + "}:fenced" }

// chaosParallel lets a scenario run beside other tests in the short tier,
// where it checks invariants against generous bounds on servers of its own.
// The long tier runs the scenarios one at a time, since it publishes their
// timings. TestChaosMutants never runs beside anything: it swaps the
// library's scripts for the whole test binary.
func chaosParallel(t *testing.T) {
	if !chaos.Long() {
		t.Parallel()
	}
}

// publish writes a section of docs/reliability.md's figures in the long
// tier, and logs it in both.
func publish(t testing.TB, s *chaos.Section) {
	t.Helper()
	t.Logf("figures for %s:\n%s", s.ID, s.Body.String())
	if !chaos.Long() {
		return
	}
	if err := s.Publish(); err != nil {
		t.Errorf("publishing %s: %v", s.ID, err)
	}
}

// seedLine is the first line of every published block: how to replay it.
func seedLine(t testing.TB, seed int64, started time.Time) string {
	return fmt.Sprintf("_Measured by `%s` with base seed %d (test seed %d) in %v; replay with `DLOCK_CHAOS=long go test -run '^%s$' -chaos.seed=%d`._\n\n",
		t.Name(), chaos.BaseSeed(), seed, time.Since(started).Round(100*time.Millisecond), t.Name(), chaos.BaseSeed())
}
