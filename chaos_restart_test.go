//go:build linux

package dlock_test

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/chaos"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestChaosRestartAndScriptFlush runs critical sections while, every
// second, the lock's Redis either forgets its scripts (SCRIPT FLUSH) or is
// killed and restarted, with and without persistence. No NOSCRIPT may reach
// a caller; a lock lost by a restart without persistence must be reported
// to its holder and never re-created. With persistence (appendfsync
// always) nothing is lost at all. The counters and the fenced store live
// on a second server that is not restarted.
func TestChaosRestartAndScriptFlush(t *testing.T) {
	chaosParallel(t)
	for _, persist := range []bool{false, true} {
		name := "without-persistence"
		if persist {
			name = "with-persistence"
		}
		t.Run(name, func(t *testing.T) { testRestartAndFlush(t, persist) })
	}
}

// testRestartAndFlush is TestChaosRestartAndScriptFlush with or without
// persistence: one run, its checks, and its section of the report.
func testRestartAndFlush(t *testing.T, persist bool) {
	started := time.Now()
	seed := chaos.Seed(t)
	run := runRestartsAndFlushes(t, persist, chaos.Rand(seed))
	leaked, safety := run.check(t)
	s := chaos.NewSection("restart-" + map[bool]string{false: "no-persistence", true: "persistence"}[persist])
	s.Printf("%s", seedLine(t, seed, started))
	run.report(s, leaked, safety)
	publish(t, s)
}

// restartRun is what one run of testRestartAndFlush recorded.
type restartRun struct {
	h                 chaos.History
	persist           bool
	ttl               time.Duration
	procs             int
	flushes, restarts int
}

// runRestartsAndFlushes runs critical sections on four locks, in this
// process and chaos.Pick(0, 2) children, while one fault a second, a
// SCRIPT FLUSH or a kill -9 and restart with equal odds, hits their Redis;
// it records everything, the final counters and the keys left.
func runRestartsAndFlushes(t *testing.T, persist bool, r *rand.Rand) restartRun {
	var opts []redistest.Option
	if persist {
		opts = append(opts, redistest.WithPersistence())
	}
	srv := redistest.Start(t, opts...)
	store := redistest.Start(t)
	var (
		rec      chaos.Recorder
		faults   = chaos.Pick(4, 60)
		children = chaos.Pick(0, 2)
		ctx, end = context.WithCancel(testCtx(t))
		names    []string
	)
	defer end()
	run := restartRun{persist: persist, ttl: 2 * time.Second, procs: 1 + children}
	for i := 0; i < 4; i++ {
		names = append(names, fmt.Sprintf("%s-%d", t.Name(), i))
	}
	spec := chaosSpec{
		Addrs: []string{srv.Addr()}, StoreAddr: store.Addr(), Locks: names, TTL: run.ttl,
		Goroutines: 4, Sections: 1 << 30, Hold: 400 * time.Millisecond, HoldRand: true, Beat: 10 * time.Millisecond,
		Counter: true, Fenced: true, Hooks: true, LockTimeout: 5 * time.Second,
	}
	var kids []*chaosChild
	for i := 0; i < children; i++ {
		s := spec
		s.Proc, s.Seed = fmt.Sprintf("p%d", i+1), r.Int63()
		kids = append(kids, startChaosChild(t, s, &rec))
	}
	var wg sync.WaitGroup
	local := spec
	local.Proc, local.Seed = "p0", r.Int63()
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := runChaosWorker(ctx, local, &rec); err != nil {
			t.Error(err)
		}
	}()
	go func() {
		defer wg.Done()
		probe(ctx, redisClientNoRetry(t, srv.Addr()), &rec, "dlock:*", 10*time.Millisecond)
	}()

	for i := 0; i < faults; i++ {
		time.Sleep(time.Second)
		if r.Intn(2) == 0 {
			srv.FlushScripts(t)
			rec.Add(chaos.Event{Kind: chaos.Fault, Note: "flush"})
			run.flushes++
			continue
		}
		t0 := chaos.Now()
		srv.Restart()
		e := chaos.Event{Kind: chaos.Fault, T0: t0, T: chaos.Now(), Note: "restart"}
		if !persist {
			e.Note = "wipe"
		}
		rec.Add(e)
		run.restarts++
	}
	time.Sleep(2 * run.ttl) // every lease wiped by the last restart has seen it
	end()
	wg.Wait()
	for _, k := range kids {
		k.kill() // they run sections until killed
	}
	for _, n := range names {
		recordFinal(t, store.Client(t), &rec, n)
	}
	probeAll(t, srv.Client(t), &rec, "dlock:*")
	run.h = rec.History()
	return run
}

// check fails t for a NOSCRIPT that reached a caller, and for a safety
// violation: with persistence any, and no lease lost; without it, any but
// lost updates of the unfenced counters, which a restart that forgets
// every lock allows (until their holders' next renewal fails, they and the
// next holders both believe they hold it). It returns both findings.
func (run restartRun) check(t *testing.T) (leaked, safety []chaos.Violation) {
	h := run.h
	leaked = chaos.ErrorsContaining(h, "NOSCRIPT")
	expectNone(t, "NOSCRIPT reaching callers", leaked)
	safety = chaos.Safety(h)
	if !run.persist {
		var kept []chaos.Violation
		for _, v := range safety {
			if v.Check != chaos.CheckLostUpdate {
				kept = append(kept, v)
			}
		}
		expectNone(t, "restart without persistence", kept)
		return leaked, safety
	}
	expectNone(t, "restart with persistence", append(safety, chaos.Overlaps(h, 1, 0)...))
	for _, e := range h.Of(chaos.Lost) {
		t.Errorf("lease lost across a restart with persistence: %s", e)
	}
	return leaked, safety
}

// report adds the run's table to s.
func (run restartRun) report(s *chaos.Section, leaked, safety []chaos.Violation) {
	h := run.h
	wiped := 0
	for _, w := range h.Of(chaos.Fault) {
		if w.Note != "wipe" {
			continue
		}
		for _, e := range h.Of(chaos.Acquire) {
			if e.OK && e.T < w.T0 && !releasedBefore(h, e.Hold, w.T0) {
				wiped++
			}
		}
	}
	byCheck := chaos.ByCheck(safety)
	stale := h.Count(chaos.Write, func(e chaos.Event) bool { return chaos.IsErr(e.Err, chaos.ErrStale) })
	s.Table([]string{"faults (flush / restart)", "critical sections", "acquisitions failed (Redis down)", "NOSCRIPT errors seen by callers", "leases wiped", "wiped leases not reported", "lost locks re-created", "leases lost", "overlapping holds", "lost updates (unfenced)", "stale fenced ops accepted (refused)"},
		[][]string{{
			fmt.Sprintf("%d / %d", run.flushes, run.restarts),
			strconv.Itoa(h.Count(chaos.Acquire, func(e chaos.Event) bool { return e.OK })),
			strconv.Itoa(h.Count(chaos.Acquire, func(e chaos.Event) bool { return !e.OK })),
			strconv.Itoa(len(leaked)),
			strconv.Itoa(wiped),
			strconv.Itoa(byCheck[chaos.CheckUnreported]),
			strconv.Itoa(byCheck[chaos.CheckRecreated]),
			strconv.Itoa(h.Count(chaos.Lost, nil)),
			strconv.Itoa(len(chaos.Overlaps(h, 1, 0))),
			strconv.Itoa(byCheck[chaos.CheckLostUpdate]),
			fmt.Sprintf("%d (%d)", byCheck[chaos.CheckStaleAccepted], stale),
		}})
	s.Printf("\nTTL %v, %d processes × 4 goroutines on 4 locks, holds of 200–400 ms; one fault a second, each a SCRIPT FLUSH or a kill -9 and restart with equal odds.\n", run.ttl, run.procs)
}

// releasedBefore reports whether hold's release was invoked before t.
func releasedBefore(h chaos.History, hold string, t int64) bool {
	for _, e := range h {
		if e.Kind == chaos.Release && e.Hold == hold {
			return e.T0 < t
		}
	}
	return false
}
