//go:build linux

package dlock_test

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/chaos"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// TestChaosMutants proves that the checks have teeth: each deliberately
// broken variant of the library runs a scenario that the correct library
// passes (its control, run first), and the named checker must flag it in
// one of up to three runs. A mutant that survives them fails the test.
func TestChaosMutants(t *testing.T) {
	started := time.Now()
	seed := chaos.Seed(t)
	r := chaos.Rand(seed)
	var rows [][]string
	for _, c := range mutantCases() {
		controlSeed, mutantSeed := r.Int63(), r.Int63()
		t.Run(c.mutant, func(t *testing.T) { rows = append(rows, c.catch(t, controlSeed, mutantSeed)) })
	}

	s := chaos.NewSection("mutants")
	s.Printf("%s", seedLine(t, seed, started))
	s.Table([]string{"mutant", "injected into", "scenario", "must be caught by", "violations found", "correct library, same scenario"}, rows)
	publish(t, s)
}

// mutantCase is a broken variant of the library, the scenario that must
// expose it and the check that must flag it there.
type mutantCase struct {
	mutant   string
	where    string // "in-process" or "child worker"
	scenario string
	want     string // the check that must flag it
	run      func(t *testing.T, r *rand.Rand, mutant string) chaos.History
	checks   func(h chaos.History) []chaos.Violation
}

// catch runs c's scenario with the correct library (the control, which
// must be clean), then with the mutant until c.want flags it, at most
// three times. It returns the report's row.
func (c mutantCase) catch(t *testing.T, controlSeed, mutantSeed int64) []string {
	var control chaos.History
	t.Run("control", func(t *testing.T) {
		control = c.run(t, chaos.Rand(controlSeed), "")
		expectNone(t, "the correct library", c.checks(control))
	})
	// A mutant's fault shows only when its timing lines up, and a process
	// starved of a core on a loaded machine can miss that window: a mutant
	// caught in any of three runs is caught. Each run is a subtest of its
	// own, so that its mutant and clients are gone before the next.
	var flagged []chaos.Violation
	mr := chaos.Rand(mutantSeed)
	for run := 1; ; run++ {
		t.Run("mutant", func(t *testing.T) { flagged = c.checks(c.run(t, mr, c.mutant)) })
		if chaos.ByCheck(flagged)[c.want] > 0 {
			break
		}
		if run == 3 {
			t.Errorf("mutant %q survived %d runs: %q found nothing (all checks: %v)", c.mutant, run, c.want, chaos.ByCheck(flagged))
			break
		}
		t.Logf("run %d: %q found nothing (all checks: %v); again", run, c.want, chaos.ByCheck(flagged))
	}
	return []string{"`" + c.mutant + "`", c.where, c.scenario, c.want, summarizeChecks(flagged),
		map[bool]string{true: "clean", false: "FLAGGED"}[len(c.checks(control)) == 0]}
}

// mutantCases are TestChaosMutants's mutants, each with its scenario.
func mutantCases() []mutantCase {
	return []mutantCase{
		{
			mutant: "release-by-del", where: "child worker", scenario: "holder paused past its TTL, then unlocks late",
			want: chaos.CheckForeignRelease,
			run: func(t *testing.T, r *rand.Rand, mutant string) chaos.History {
				srv := redistest.Start(t)
				var rec chaos.Recorder
				runPauseTrial(t, srv, &rec, r, t.Name(), 300*time.Millisecond, 600*time.Millisecond, mutant)
				return rec.History()
			},
			checks: chaos.Safety,
		},
		{
			mutant: "extend-without-owner-check", where: "in-process", scenario: "lock key wiped under a renewing holder, then taken by another",
			want: chaos.CheckForeignExtend,
			run: func(t *testing.T, r *rand.Rand, mutant string) chaos.History {
				return runWipeScenario(t, r, mutant, true)
			},
			// A wipe breaks mutual exclusion until the holder's next
			// renewal (the restart scenario measures it): overlaps are
			// expected here, everything else is not.
			checks: chaos.Safety,
		},
		{
			mutant: "extend-recreates", where: "in-process", scenario: "lock key wiped under a renewing holder",
			want: chaos.CheckRecreated,
			run: func(t *testing.T, r *rand.Rand, mutant string) chaos.History {
				return runWipeScenario(t, r, mutant, false)
			},
			checks: func(h chaos.History) []chaos.Violation { return chaos.All(h, 1, 0) },
		},
		{
			mutant: "validity-ignores-elapsed", where: "in-process", scenario: "grant's reply delayed 1 s, then Redis blackholed",
			want: chaos.CheckOverlap,
			run: func(t *testing.T, r *rand.Rand, mutant string) chaos.History {
				if mutant != "" {
					installMutant(t, mutant)
				}
				return runBlackholeWatched(t, r)
			},
			// Beliefs may outlast the successor's grant by this much on a
			// loaded machine; the mutant's outlast it by about the 1 s the
			// reply was held.
			checks: func(h chaos.History) []chaos.Violation { return chaos.All(h, 1, int64(100*time.Millisecond)) },
		},
		{
			mutant: "ignore-replica-acks", where: "in-process", scenario: "failover after a grant the replica never received, with WithReplicaAck(1)",
			want: chaos.CheckOverlap,
			run: func(t *testing.T, r *rand.Rand, mutant string) chaos.History {
				if mutant != "" {
					installMutant(t, mutant)
				}
				var rec chaos.Recorder
				for i := 0; i < 2; i++ {
					runFailoverTrial(t, &rec, fmt.Sprintf("%s-%d", t.Name(), i),
						failoverCase{stall: true, detect: 200 * time.Millisecond, ack: 1, trials: 1})
				}
				return rec.History()
			},
			checks: func(h chaos.History) []chaos.Violation { return chaos.All(h, 1, 0) },
		},
	}
}

// runBlackholeWatched runs a blackhole trial (TTL 1.5 s, the grant's reply
// held for 1 s) and returns its history, unless the holder recorded no
// belief for more than 200 ms while it held: a process that waited that
// long for a core may have slept through the whole time its beliefs
// outlast the successor's grant, so the trial is run again, up to 5
// times.
func runBlackholeWatched(t *testing.T, r *rand.Rand) chaos.History {
	t.Helper()
	srv := redistest.Start(t)
	var h chaos.History
	for i := 0; i < 5; i++ {
		var rec chaos.Recorder
		name := fmt.Sprintf("%s-%d", t.Name(), i)
		runBlackholeTrial(t, srv, &rec, r, name, 1500*time.Millisecond, time.Second)
		h = rec.History()
		gap := longestUnheld(h, "holder-"+name)
		if gap <= 200*time.Millisecond {
			break
		}
		t.Logf("trial %d: the holder recorded no belief for %v; again", i, gap)
	}
	return h
}

// longestUnheld returns the longest time proc went without a Held event
// between its acquisition and its loss (or its last Held event).
func longestUnheld(h chaos.History, proc string) time.Duration {
	var stamps []int64
	for _, e := range h {
		if e.Proc == proc && ((e.Kind == chaos.Acquire && e.OK) || e.Kind == chaos.Held || e.Kind == chaos.Lost) {
			stamps = append(stamps, e.T)
		}
	}
	sort.Slice(stamps, func(i, j int) bool { return stamps[i] < stamps[j] })
	var longest int64
	for i := 1; i < len(stamps); i++ {
		longest = max(longest, stamps[i]-stamps[i-1])
	}
	return time.Duration(longest)
}

func summarizeChecks(vs []chaos.Violation) string {
	by := chaos.ByCheck(vs)
	var parts []string
	for k, n := range by {
		parts = append(parts, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// runWipeScenario has a holder in this process renew its lock while the
// test deletes the lock's key, as a restart without persistence would;
// with successor, another client takes the lock right after. A prober
// watches the key until the holder is done. mutant, if set, is installed in
// this process.
//
// The holder's TTL of 3 s is renewed every second, and it holds for 2.5 s:
// its renewals after the wipe (and after the successor's grant) come at
// about 1 s and 2 s, and a process that waits for a core for a moment on a
// loaded machine keeps its lease. (A lease lost to a stall would end the
// holder before it renews, and a mutant would go uncaught.)
func runWipeScenario(t *testing.T, r *rand.Rand, mutant string, successor bool) chaos.History {
	t.Helper()
	if mutant != "" {
		installMutant(t, mutant)
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	name := t.Name()
	var rec chaos.Recorder
	granted := make(chan struct{})
	holderDone := make(chan struct{})
	holderSeed, succSeed := r.Int63(), r.Int63()
	go func() {
		defer close(holderDone)
		err := runChaosWorker(ctx, chaosSpec{
			Proc: "holder", Addrs: []string{srv.Addr()}, Locks: []string{name}, TTL: 3 * time.Second,
			Sections: 1, Hold: 2500 * time.Millisecond, Beat: 5 * time.Millisecond, StopOnLoss: true, Hooks: true,
			Seed: holderSeed, onLease: func(*dlock.Lease) { close(granted) },
		}, &rec)
		if err != nil {
			t.Error(err)
		}
	}()
	probeCtx, stopProbe := context.WithCancel(ctx)
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		probe(probeCtx, rdb, &rec, lockKey(name), 5*time.Millisecond)
	}()
	select {
	case <-granted:
	case <-holderDone:
		stopProbe()
		<-probed
		t.Fatal("the holder ended without a grant")
	}
	time.Sleep(time.Duration(150+r.Intn(100)) * time.Millisecond)
	t0 := chaos.Now()
	rdb.Del(ctx, lockKey(name))
	rec.Add(chaos.Event{Kind: chaos.Fault, T0: t0, T: chaos.Now(), Note: "wipe", Lock: name})
	if successor {
		err := runChaosWorker(ctx, chaosSpec{
			Proc: "successor", Addrs: []string{srv.Addr()}, Locks: []string{name}, TTL: 3 * time.Second,
			Sections: 1, Hold: 600 * time.Millisecond, Beat: 5 * time.Millisecond, Hooks: true, Seed: succSeed,
		}, &rec)
		if err != nil {
			t.Error(err)
		}
	}
	<-holderDone
	stopProbe()
	<-probed
	return rec.History()
}

// chaosMutantEnv names the mutant a child worker installs at start.
const chaosMutantEnv = "DLOCK_CHAOS_MUTANT"

// chaosMutants are deliberately broken variants of the library, which the
// suite must catch (chaos_mutant_test.go). Each installs itself and returns
// the function that restores the correct version.
var chaosMutants = map[string]func() (restore func()){
	// Release by plain DEL, without comparing the owner.
	"release-by-del": swapScript(&scripts.MutexRelease, `redis.call('DEL', KEYS[1]) return 1`),
	// Renew with PEXPIRE, without comparing the owner.
	"extend-without-owner-check": swapScript(&scripts.OwnedExtend,
		`for i = 1, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end return 1`),
	// Renew with SET: a lost lock comes back.
	"extend-recreates": swapScript(&scripts.OwnedExtend,
		`redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1`),
	// Validity counted from the reply, not from the request.
	"validity-ignores-elapsed": dlock.MutateValidityIgnoringElapsed,
	// Grants and renewals counted whatever WAIT answered: the clients the
	// suite makes then carry ackLiar.
	"ignore-replica-acks": func() func() {
		ignoreReplicaAcks.Store(true)
		return func() { ignoreReplicaAcks.Store(false) }
	},
}

// ignoreReplicaAcks is set by the "ignore-replica-acks" mutant.
var ignoreReplicaAcks atomic.Bool

// ackLiar is the "ignore-replica-acks" mutant: a go-redis hook that makes
// every WAIT report as many replicas as it asked for, which is what a
// library that ignored WAIT's answer would act on. The library itself needs
// no seam for it: WAIT's reply is all it reads.
type ackLiar struct{}

func (ackLiar) DialHook(next redis.DialHook) redis.DialHook { return next }

func (ackLiar) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if ackLie(cmd) {
			return nil
		}
		return err
	}
}

func (ackLiar) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			ackLie(cmd)
		}
		return err
	}
}

// ackLie rewrites a WAIT's reply to the number of replicas it asked for.
func ackLie(cmd redis.Cmder) bool {
	c, ok := cmd.(*redis.Cmd)
	args := cmd.Args()
	if !ok || len(args) < 2 || !strings.EqualFold(argString(args[0]), "wait") || c.Err() != nil {
		return false
	}
	asked, err := strconv.ParseInt(argString(args[1]), 10, 64)
	if err != nil {
		return false
	}
	c.SetVal(asked)
	return true
}

func swapScript(target **driver.Script, src string) func() func() {
	return func() func() {
		orig := *target
		*target = driver.NewScript(src)
		return func() { *target = orig }
	}
}

// installMutant installs mutant in this process until the end of the
// test. Call it before creating any Client; the restore runs after their
// cleanups.
func installMutant(t testing.TB, mutant string) {
	t.Helper()
	m := chaosMutants[mutant]
	if m == nil {
		t.Fatalf("unknown mutant %q", mutant)
	}
	t.Cleanup(m()) // registered first, so it runs after the clients' cleanups
}
