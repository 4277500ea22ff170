package chaos

import (
	"flag"
	"hash/fnv"
	"math/rand"
	"os"
	"strconv"
	"testing"
	"time"
)

// Environment variables of the suite.
const (
	// SeedEnv sets the base seed, like -chaos.seed (which wins).
	SeedEnv = "DLOCK_CHAOS_SEED"
	// TierEnv selects the tier: "long" runs the trial counts of
	// docs/reliability.md; anything else the short tier of `make test`.
	TierEnv = "DLOCK_CHAOS"
	// ReportEnv names a directory where long-tier scenarios write their
	// figures, one Markdown block per file, for cmd/chaosreport.
	ReportEnv = "DLOCK_CHAOS_REPORT"
)

var seedFlag = flag.Int64("chaos.seed", 0, "base seed of the chaos suite's random choices (0: from "+SeedEnv+", else the clock)")

var baseSeed = func() int64 {
	if s, err := strconv.ParseInt(os.Getenv(SeedEnv), 10, 64); err == nil && s != 0 {
		return s
	}
	return time.Now().UnixNano() & (1<<53 - 1)
}()

// BaseSeed returns the run's base seed: -chaos.seed, else $DLOCK_CHAOS_SEED,
// else one drawn from the clock at start-up. Call it after flag parsing.
func BaseSeed() int64 {
	if *seedFlag != 0 {
		return *seedFlag
	}
	return baseSeed
}

// Seed returns the seed of one test, derived from the base seed and the
// test's name (so that a test replays alone with the same base seed), and
// logs it with how to replay it.
func Seed(t testing.TB) int64 {
	t.Helper()
	h := fnv.New64a()
	h.Write([]byte(t.Name()))
	s := BaseSeed() ^ int64(h.Sum64()&(1<<62-1))
	t.Logf("chaos: seed %d (base seed %d; replay with -chaos.seed=%d or %s=%d, -run '^%s$')",
		s, BaseSeed(), BaseSeed(), SeedEnv, BaseSeed(), t.Name())
	return s
}

// Rand returns a source of random choices seeded with seed (from Seed).
// It is not safe for concurrent use: derive one per goroutine with Fork.
func Rand(seed int64) *rand.Rand { return rand.New(rand.NewSource(seed)) }

// Fork returns a new generator seeded from r, for a goroutine or a child
// process, and the seed it used.
func Fork(r *rand.Rand) (*rand.Rand, int64) {
	s := r.Int63()
	return rand.New(rand.NewSource(s)), s
}

// Long reports whether the long tier was asked for.
func Long() bool { return os.Getenv(TierEnv) == "long" }

// Pick returns short in the short tier and long in the long one.
func Pick[T any](short, long T) T {
	if Long() {
		return long
	}
	return short
}
