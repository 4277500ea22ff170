//go:build linux

package dlock_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/chaos"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestChaosContention runs critical sections on a few locks from goroutines
// of this process and of several child processes, with no faults: no two
// holds of a lock may overlap, no increment of the unfenced counters may be
// lost, no fenced write may be refused or lost, every key has a TTL, tokens
// increase, and no renewal follows a release.
func TestChaosContention(t *testing.T) {
	started := time.Now()
	seed := chaos.Seed(t)
	srv := redistest.Start(t)
	r := chaos.Rand(seed)
	var (
		locks      = chaos.Pick(2, 4)
		children   = chaos.Pick(2, 4)
		childGos   = chaos.Pick(2, 4)
		localGos   = chaos.Pick(4, 4)
		perGo      = chaos.Pick(60, 500)
		names      []string
		rec        chaos.Recorder
		ctx        = testCtx(t)
		sectionsIn = (children*childGos + localGos) * perGo
	)
	if chaos.Long() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
	}
	for i := 0; i < locks; i++ {
		names = append(names, fmt.Sprintf("%s-%d", t.Name(), i))
	}
	spec := chaosSpec{
		Addrs:   []string{srv.Addr()},
		Locks:   names,
		TTL:     time.Second,
		Counter: true,
		Fenced:  true,
		Hooks:   true,
	}

	probeCtx, stopProbe := context.WithCancel(ctx)
	var probing sync.WaitGroup
	probing.Add(1)
	go func() {
		defer probing.Done()
		probe(probeCtx, srv.Client(t), &rec, "dlock:*", 20*time.Millisecond)
	}()

	var kids []*chaosChild
	for i := 0; i < children; i++ {
		s := spec
		s.Proc, s.Goroutines, s.Sections, s.Seed = fmt.Sprintf("p%d", i+1), childGos, perGo, r.Int63()
		kids = append(kids, startChaosChild(t, s, &rec))
	}
	local := spec
	local.Proc, local.Goroutines, local.Sections, local.Seed = "p0", localGos, perGo, r.Int63()
	if err := runChaosWorker(ctx, local, &rec); err != nil {
		t.Fatal(err)
	}
	for _, k := range kids {
		k.wait(chaos.Pick(2*time.Minute, 15*time.Minute))
	}
	stopProbe()
	probing.Wait()
	rdb := srv.Client(t)
	for _, n := range names {
		recordFinal(t, rdb, &rec, n)
	}
	probeAll(t, rdb, &rec, "dlock:*")

	h := rec.History()
	acquired := h.Count(chaos.Acquire, func(e chaos.Event) bool { return e.OK })
	if acquired != sectionsIn {
		t.Errorf("%d of %d critical sections acquired their lock", acquired, sectionsIn)
	}
	vs := chaos.All(h, 1, 0)
	expectNone(t, "contention", vs)

	// The fenced counters: every accepted increment is in the value, and
	// with no faults nothing is refused.
	var fencedLost, refused int
	for _, n := range names {
		accepted := h.Count(chaos.Write, func(e chaos.Event) bool { return e.Lock == n && e.OK })
		refused += h.Count(chaos.Write, func(e chaos.Event) bool { return e.Lock == n && !e.OK })
		v, _ := rdb.Get(ctx, chaosFencedKey(n)).Result()
		if got, _ := strconv.Atoi(v); got != accepted {
			fencedLost += accepted - got
			t.Errorf("lock %s: fenced counter %d after %d accepted increments", n, got, accepted)
		}
	}
	if refused != 0 {
		t.Errorf("%d fenced increments refused without any fault", refused)
	}

	var wait chaos.Durations
	for _, e := range h.Of(chaos.Acquire) {
		wait.Add(time.Duration(e.T - e.T0))
	}
	s := chaos.NewSection("contention")
	s.Printf("%s", seedLine(t, seed, started))
	by := chaos.ByCheck(vs)
	s.Table([]string{"critical sections", "processes × goroutines", "locks", "overlapping holds", "lost updates (unfenced)", "lost updates (fenced)", "fenced writes refused", "keys without TTL", "token regressions", "renewals after Unlock"},
		[][]string{{
			strconv.Itoa(acquired),
			fmt.Sprintf("%d × %d + 1 × %d", children, childGos, localGos),
			strconv.Itoa(locks),
			strconv.Itoa(by[chaos.CheckOverlap]),
			strconv.Itoa(by[chaos.CheckLostUpdate]),
			strconv.Itoa(fencedLost),
			strconv.Itoa(refused),
			strconv.Itoa(by[chaos.CheckNoTTL]),
			strconv.Itoa(by[chaos.CheckTokenOrder]),
			strconv.Itoa(by[chaos.CheckRenewAfter]),
		}})
	s.Printf("\nWait for the lock (Lock call to grant), all sections: %s. %d keys probed %d times.\n",
		wait.Summary(), distinctKeys(h), h.Count(chaos.Probe, nil))
	publish(t, s)
}

// distinctKeys counts the keys the probes saw.
func distinctKeys(h chaos.History) int {
	seen := map[string]bool{}
	for _, e := range h.Of(chaos.Probe) {
		seen[e.Key] = true
	}
	return len(seen)
}

// TestChaosSemaphoreContention has goroutines of this process and of child
// processes take one permit at a time of a few semaphores, with no faults:
// no more than the limit may ever hold permits of one semaphore, tokens
// increase with every grant, and every key has a TTL.
func TestChaosSemaphoreContention(t *testing.T) {
	started := time.Now()
	seed := chaos.Seed(t)
	r := chaos.Rand(seed)
	srv := redistest.Start(t)
	const limit = 3
	var (
		children = chaos.Pick(1, 3)
		gos      = 3
		perGo    = chaos.Pick(30, 300)
		rec      chaos.Recorder
		ctx      = testCtx(t)
		names    = []string{t.Name() + "-a", t.Name() + "-b"}
	)
	spec := chaosSpec{
		Kind: "semaphore", Permits: limit, Addrs: []string{srv.Addr()}, Locks: names, TTL: time.Second,
		Goroutines: gos, Sections: perGo, Hold: 4 * time.Millisecond, HoldRand: true, Beat: time.Millisecond,
	}
	var kids []*chaosChild
	for i := 0; i < children; i++ {
		s := spec
		s.Proc, s.Seed = fmt.Sprintf("p%d", i+1), r.Int63()
		kids = append(kids, startChaosChild(t, s, &rec))
	}
	local := spec
	local.Proc, local.Seed = "p0", r.Int63()
	if err := runChaosWorker(ctx, local, &rec); err != nil {
		t.Fatal(err)
	}
	for _, k := range kids {
		k.wait(10 * time.Minute)
	}
	probeAll(t, srv.Client(t), &rec, "dlock:*")
	h := rec.History()
	vs := chaos.All(h, limit, 0)
	expectNone(t, "semaphore contention", vs)
	acquired := h.Count(chaos.Acquire, func(e chaos.Event) bool { return e.OK })
	if want := (children + 1) * gos * perGo; acquired != want {
		t.Errorf("%d of %d acquisitions succeeded", acquired, want)
	}
	// The limit must be reached, or the check proved nothing.
	peak := 0
	for c := limit; c >= 1 && peak == 0; c-- {
		if len(chaos.Overlaps(h, c-1, 0)) > 0 {
			peak = c
		}
	}
	if peak < limit {
		t.Errorf("at most %d permits were ever held at once: the limit of %d was never reached", peak, limit)
	}
	s := chaos.NewSection("semaphore-contention")
	s.Printf("%s", seedLine(t, seed, started))
	by := chaos.ByCheck(vs)
	s.Table([]string{"acquisitions", "limit", "most held at once", "over the limit", "token regressions", "keys without TTL"},
		[][]string{{strconv.Itoa(acquired), strconv.Itoa(limit), strconv.Itoa(peak), strconv.Itoa(by[chaos.CheckOverlap]),
			strconv.Itoa(by[chaos.CheckTokenOrder]), strconv.Itoa(by[chaos.CheckNoTTL])}})
	s.Printf("\n%d processes × %d goroutines, one permit each, on %d semaphores; holds of 2–4 ms.\n", children+1, gos, len(names))
	publish(t, s)
}
