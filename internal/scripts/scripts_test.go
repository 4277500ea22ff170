package scripts

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
)

// all is every script the package exports.
var all = map[string]*driver.Script{
	"MutexAcquire": MutexAcquire, "MutexRelease": MutexRelease, "MutexTransfer": MutexTransfer, "ReentrantTransfer": ReentrantTransfer,
	"ReentrantAcquire": ReentrantAcquire, "ReentrantRelease": ReentrantRelease, "ReentrantHolds": ReentrantHolds,
	"MultiAcquire": MultiAcquire, "MultiRelease": MultiRelease, "OwnedExtend": OwnedExtend, "OwnedPTTL": OwnedPTTL, "HeldRecord": HeldRecord,
	"OwnedRelease": OwnedRelease, "OwnedTransfer": OwnedTransfer, "RedlockAcquire": RedlockAcquire,
	"QueueKeep": QueueKeep, "RWAcquire": RWAcquire, "RWRelease": RWRelease, "RWTransfer": RWTransfer, "RWExtend": RWExtend,
	"RWPTTL": RWPTTL, "RWDowngrade": RWDowngrade, "SemAcquire": SemAcquire, "SemRelease": SemRelease, "SemTransfer": SemTransfer,
	"SemSetPermits": SemSetPermits, "SemExtend": SemExtend, "SemPTTL": SemPTTL,
	"SemAvailable": SemAvailable, "LatchTrySet": LatchTrySet, "LatchCountDown": LatchCountDown,
	"LatchCount": LatchCount, "Inspect": Inspect,
	"ElectionProclaim": ElectionProclaim, "ElectionLeader": ElectionLeader, "ElectionResign": ElectionResign,
}

// TestFenceIssuedInOnePlace: no .lua file but fence_lib.lua runs INCR, the
// command that issues a fencing token, and every directive was expanded.
func TestFenceIssuedInOnePlace(t *testing.T) {
	files, err := filepath.Glob("*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("no .lua files: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if f != "fence_lib.lua" && strings.Contains(strings.ToUpper(string(b)), "'INCR'") {
			t.Errorf("%s runs INCR: fencing tokens are issued by fence_lib.lua alone", f)
		}
	}
	for name, s := range all {
		if strings.Contains(s.Source(), "--@") {
			t.Errorf("%s: a directive was left unexpanded", name)
		}
	}
}

func TestFenceArgs(t *testing.T) {
	good := map[string][2]string{
		"(KEYS[2], ARGV[4])":                          {"KEYS[2]", "ARGV[4]"},
		"(fence_key, retention_ms)":                   {"fence_key", "retention_ms"},
		"(KEYS[2], string.match(ARGV[5], '(%d+)$'))":  {"KEYS[2]", "string.match(ARGV[5], '(%d+)$')"},
		`(KEYS[k + 2], f("a,)", 'b\'', {1, 2}))`:      {"KEYS[k + 2]", `f("a,)", 'b\'', {1, 2})`},
		"( KEYS[4] ,  ARGV[9] )":                      {"KEYS[4]", "ARGV[9]"},
		"(KEYS[2], string.match(ARGV[5], '(%d+)$')) ": {}, // text after
		"(KEYS[2])":                                     {},
		"(KEYS[2], ARGV[4], 1)":                         {},
		"(KEYS[2], f(ARGV[4])":                          {},
		"(KEYS[2], ARGV[4]) -- a comment":               {},
		"(, ARGV[4])":                                   {},
		"(KEYS[2], 'x)":                                 {},
		"(KEYS[2], ARGV[4]))":                           {},
		"(KEYS[2], string.match(ARGV[5], '(%d+)$')":     {},
		"(KEYS[2], string.match(ARGV[5], '(%d+)$')))))": {},
	}
	for in, want := range good {
		got, panicked := func() (got [2]string, panicked bool) {
			defer func() { panicked = recover() != nil }()
			return fenceArgs(in), false
		}()
		if want == ([2]string{}) {
			if !panicked {
				t.Errorf("fenceArgs(%q) = %q; want a panic", in, got)
			}
			continue
		}
		if panicked || got != want {
			t.Errorf("fenceArgs(%q) = %q (panicked %v); want %q", in, got, panicked, want)
		}
	}
}

// TestFenceRefusedDirective: "--@fence_refused(key)" becomes the refusal
// block for that key, with the functions it calls; anything but one key
// panics.
func TestFenceRefusedDirective(t *testing.T) {
	got := expand("  --@fence_refused(KEYS[3])\n")
	for _, want := range []string{"  if type(token) ~= 'number' then\n", "dlock_fence_conflict(KEYS[3])", "local function dlock_counter("} {
		if !strings.Contains(got, want) {
			t.Errorf("expanded to %q; want it to hold %q", got, want)
		}
	}
	for _, bad := range []string{"--@fence_refused()\n", "--@fence_refused(KEYS[3], ARGV[1])\n", "--@fence_refused(KEYS[3]\n"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("expand(%q) did not panic", bad)
				}
			}()
			expand(bad)
		}()
	}
}

// TestScriptsLoad: every script, with its copies of fence_lib.lua, compiles
// on a real server, under the hash the package computed.
func TestScriptsLoad(t *testing.T) {
	srv := redistest.Start(t)
	for name, s := range all {
		if got := srv.Do(t, "SCRIPT", "LOAD", s.Source()); got != s.Hash() {
			t.Errorf("%s: SCRIPT LOAD gave %v; want %s", name, got, s.Hash())
		}
	}
}

// TestFenceTokens runs each script that issues tokens through its grant
// paths: a fresh counter starts at the server clock (µs) and expires after
// the retention; a used one counts on by one; a grant that returns its
// token to its caller leaves the counter's expiry as it is, one made
// through lock_lib pushes it back; a foreign value is a conflict, with
// nothing taken.
func TestFenceTokens(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for name, g := range fenceGrants(ctx, rdb) {
		checkFenceGrant(ctx, t, rdb, name, g)
	}
}

// fenceRetention is the fencing key's retention TestFenceTokens's grants
// ask for, in ms.
const fenceRetention = 3_600_000

// fenceGrant is a script call that grants a lock and issues its token
// from the counter fence.
type fenceGrant struct {
	fence string
	keys  []string // every key the grant writes, deleted between runs
	run   func(round int) (any, error)
	keep  bool // pushes the counter's expiry back
}

// fenceGrants are the script calls that issue tokens, over rdb.
func fenceGrants(ctx context.Context, rdb *redis.Client) map[string]fenceGrant {
	ret := strconv.Itoa(fenceRetention)
	timings := "30000 5000 " + ret
	member := strings.Repeat("ab", 16) + "owner"
	eval := func(s *driver.Script, keys []string, args ...any) *redis.Cmd {
		return rdb.Eval(ctx, s.Source(), keys, args...)
	}
	return map[string]fenceGrant{
		"MutexAcquire": {"m:f", []string{"m"}, func(int) (any, error) {
			return eval(MutexAcquire, []string{"m", "m:f", "m:q", "m:w"}, "o", 10000, "0", "0p", timings).Result()
		}, false},
		"FairMutexAcquire": {"fm:f", []string{"fm"}, func(int) (any, error) {
			return eval(MutexAcquire, []string{"fm", "fm:f", "fm:q", "fm:w"}, "o", 10000, "n", "1p", timings).Result()
		}, false},
		"MutexTransfer": {"t:f", []string{"t"}, func(round int) (any, error) {
			rdb.Set(ctx, "t", "old", 0)
			return eval(MutexTransfer, []string{"t", "t:f"}, "old", "new"+strconv.Itoa(round), 10000, ret).Result()
		}, false},
		"ReentrantTransfer": {"rt:f", []string{"rt", "rt:h"}, func(round int) (any, error) {
			rdb.Set(ctx, "rt", member, 0)
			rdb.SAdd(ctx, "rt:h", member[:32])
			rdb.PExpire(ctx, "rt:h", time.Minute)
			next := strings.Repeat("c", 31) + strconv.Itoa(round) + "next" // a fresh hold id per round
			return eval(ReentrantTransfer, []string{"rt", "rt:f", "rt:h"}, member, next, 10000, ret).Result()
		}, false},
		"RWTransfer": {"rwt:f", []string{"rwt", "rwt:t"}, func(round int) (any, error) {
			rdb.ZAdd(ctx, "rwt", redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "Wold"})
			rdb.HSet(ctx, "rwt:t", "Wold", "1")
			rdb.PExpire(ctx, "rwt", time.Hour)
			return eval(RWTransfer, []string{"rwt", "rwt:f", "rwt:t"}, "Wold", "Wnew"+strconv.Itoa(round), 10000, ret).Result()
		}, false},
		"SemTransfer": {"st:f", []string{"st", "st:n"}, func(round int) (any, error) {
			rdb.ZAdd(ctx, "st", redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "old"})
			rdb.HSet(ctx, "st:n", "old", "2 1")
			rdb.PExpire(ctx, "st", time.Hour)
			rdb.PExpire(ctx, "st:n", time.Hour)
			return eval(SemTransfer, []string{"st", "st:n", "st:f"}, "old", "new"+strconv.Itoa(round), 2, 10000, ret).Result()
		}, false},
		// A solo holder (sem_lib.lua) passed on in its form.
		"SemTransferSolo": {"sts:f", []string{"sts"}, func(round int) (any, error) {
			rdb.Set(ctx, "sts", "0123old 2 5", time.Hour)
			return eval(SemTransfer, []string{"sts", "sts:n", "sts:f"}, "0123old", "new"+strconv.Itoa(round), 2, 10000, ret).Result()
		}, false},
		"ReentrantAcquire": {"re:f", []string{"re", "re:h"}, func(int) (any, error) {
			return eval(ReentrantAcquire, []string{"re", "re:f", "re:q", "re:w", "re:h"}, member, 10000, "0", "0p", timings).Result()
		}, false},
		"RWAcquire": {"rw:f", []string{"rw", "rw:t"}, func(int) (any, error) {
			return eval(RWAcquire, []string{"rw", "rw:f", "rw:q", "rw:w", "rw:t"}, "Wo", 10000, "0p", timings).Result()
		}, false},
		"SemAcquire": {"s:f", []string{"s", "s:c"}, func(int) (any, error) {
			return eval(SemAcquire, []string{"s", "s:c", "s:l", "s:f", "s:q", "s:w"}, "o", 1, 10000, "0+", "2 60000 30000 5000 "+ret+" PUBLISH").Result()
		}, false},
		"MultiAcquire": {"ml:f", []string{"ml"}, func(int) (any, error) {
			return eval(MultiAcquire, []string{"ml", "ml:f", "ml:q", "ml:w"}, "o", 10000, ret).Result()
		}, false},
		// A queue with a waiter whose lease has expired: the full path.
		"MultiAcquireFullPath": {"mlf:f", []string{"mlf", "mlf:q", "mlf:w"}, func(int) (any, error) {
			rdb.ZAdd(ctx, "mlf:q", redis.Z{Score: 1, Member: "gone"})
			rdb.HSet(ctx, "mlf:w", "gone", "1 5000")
			return eval(MultiAcquire, []string{"mlf", "mlf:f", "mlf:q", "mlf:w"}, "o", 10000, ret).Result()
		}, true},
		// A free lock with a waiter whose lease has expired: the full path,
		// which issues through dlock_issue_fence.
		"MutexAcquireFullPath": {"mf:f", []string{"mf", "mf:q", "mf:w"}, func(int) (any, error) {
			rdb.ZAdd(ctx, "mf:q", redis.Z{Score: 1, Member: "gone"})
			rdb.HSet(ctx, "mf:w", "gone", "1 5000")
			return eval(MutexAcquire, []string{"mf", "mf:f", "mf:q", "mf:w"}, "o", 10000, "0", "1p", timings).Result()
		}, true},
	}
}

// checkFenceGrant checks g's tokens: the server clock in µs from a fresh
// counter, which then expires after the retention; the next number from a
// used one, whose expiry g pushes back or not as it says; and a foreign
// value under the fencing key reported and left untouched.
func checkFenceGrant(ctx context.Context, t *testing.T, rdb *redis.Client, name string, g fenceGrant) {
	before := serverMicros(ctx, t, rdb)
	v, err := g.run(1)
	after := serverMicros(ctx, t, rdb)
	if err != nil {
		t.Errorf("%s, fresh counter: %v", name, err)
		return
	}
	first, ok := fenceToken(v).(int64)
	if !ok || first < before || first > after {
		t.Errorf("%s, fresh counter: token %v; want the server clock in µs, in [%d, %d]", name, fenceToken(v), before, after)
		return
	}
	if pttl := rdb.PTTL(ctx, g.fence).Val().Milliseconds(); pttl <= fenceRetention-5000 || pttl > fenceRetention {
		t.Errorf("%s, fresh counter: expires in %d ms; want the retention, %d", name, pttl, fenceRetention)
	}

	rdb.Del(ctx, g.keys...)
	rdb.PExpire(ctx, g.fence, 100_000*time.Second) // longer than the retention: kept, unless pushed back
	v, err = g.run(2)
	if err != nil || fenceToken(v) != first+1 {
		t.Errorf("%s, used counter: %v, %v; want token %d", name, fenceToken(v), err, first+1)
	}
	pttl := rdb.PTTL(ctx, g.fence).Val().Milliseconds()
	if pushed := pttl <= fenceRetention; pushed != g.keep {
		t.Errorf("%s, used counter: expires in %d ms; pushed back to the retention: %v, want %v", name, pttl, pushed, g.keep)
	}

	rdb.Del(ctx, g.keys...)
	rdb.Set(ctx, g.fence, "007", 0)
	if v, err := g.run(3); err == nil || !strings.Contains(err.Error(), "DLOCK_CONFLICT") {
		t.Errorf("%s, foreign fencing key: %v, %v; want DLOCK_CONFLICT", name, v, err)
	}
	// A transfer's run sets up the held lock it passes on, which stays.
	if n := rdb.Exists(ctx, g.keys[0]).Val(); n != 0 && !strings.Contains(name, "Transfer") {
		t.Errorf("%s, foreign fencing key: %s left behind", name, g.keys[0])
	}
	if got := rdb.Get(ctx, g.fence).Val(); got != "007" {
		t.Errorf("%s: the foreign fencing key changed to %q", name, got)
	}
}

// fenceToken is the token in a grant's reply.
func fenceToken(v any) any {
	if a, ok := v.([]any); ok && len(a) >= 2 {
		return a[1]
	} else if ok && len(a) == 1 { // MultiAcquire's {fence_1}
		return a[0]
	}
	return v
}

// serverMicros is rdb's server clock in µs.
func serverMicros(ctx context.Context, t *testing.T, rdb *redis.Client) int64 {
	tm, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMicro()
}

// sem_transfer.lua passes a solo holder (sem_lib.lua) on in its form: the
// next owner's value with a new token, for px; the same call sent again
// answers that token; another count or holder changes nothing; a string
// that is no solo holder's, or another holder's without an expiry, is a
// conflict.
func TestSemTransferSolo(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	keys := []string{"s", "s:n", "s:f"}
	transfer := func(owner, next string, n int) (any, error) {
		return rdb.Eval(ctx, SemTransfer.Source(), keys, owner, next, n, 10000, 3600000).Result()
	}
	rdb.Set(ctx, "s", "7a-old 2 5", time.Minute)
	rdb.Set(ctx, "s:f", "5", time.Hour)
	if v, err := transfer("7a-old", "7a-new", 3); err != nil || fmt.Sprint(v) != "[2]" {
		t.Errorf("another count: %v, %v; want [2]", v, err)
	}
	if v, err := transfer("7a-other", "7a-new", 2); err != nil || fmt.Sprint(v) != "[0]" {
		t.Errorf("another holder: %v, %v; want [0]", v, err)
	}
	if got := rdb.Get(ctx, "s").Val(); got != "7a-old 2 5" {
		t.Fatalf("refused transfers changed the holder to %q", got)
	}
	for i := 0; i < 2; i++ { // the second: the same call sent again
		if v, err := transfer("7a-old", "7a-new", 2); err != nil || fmt.Sprint(v) != "[1 6]" {
			t.Errorf("transfer %d: %v, %v; want [1 6]", i+1, v, err)
		}
	}
	if got, pttl := rdb.Get(ctx, "s").Val(), rdb.PTTL(ctx, "s").Val(); got != "7a-new 2 6" || pttl <= 9*time.Second {
		t.Errorf("holders %q for %v, want \"7a-new 2 6\" for the 10s given", got, pttl)
	}
	if n := rdb.Exists(ctx, "s:n").Val(); n != 0 {
		t.Error("a counts hash written for a solo holder")
	}
	rdb.Set(ctx, "s", "7a-new 2 6", 0) // no expiry: not a semaphore's
	if _, err := transfer("7a-other", "7a-next", 2); err == nil || !strings.Contains(err.Error(), "DLOCK_CONFLICT") {
		t.Errorf("another's solo value without an expiry: %v, want DLOCK_CONFLICT", err)
	}
	rdb.Set(ctx, "s", "no semaphore wrote this", time.Minute)
	if _, err := transfer("7a-new", "7a-next", 2); err == nil || !strings.Contains(err.Error(), "DLOCK_CONFLICT") {
		t.Errorf("a string that is no solo holder's: %v, want DLOCK_CONFLICT", err)
	}
}
