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
// increase, and no renewal follows a release (see contention.check).
func TestChaosContention(t *testing.T) {
	chaosParallel(t)
	c := runContention(t, chaosSpec{})
	c.check(t)
	c.publish(t, "contention")
}

// TestChaosFairContention is TestChaosContention on FairMutexes, where
// every waiting goroutine has its own place in the lock's queue: the same
// checks, and every section must be served.
func TestChaosFairContention(t *testing.T) {
	chaosParallel(t)
	c := runContention(t, chaosSpec{Kind: "fair"})
	c.check(t)
	c.publish(t, "fair-contention")
}

// TestChaosReentrantContention is TestChaosContention on ReentrantMutexes,
// each section an owner of its own that locks the lock again once or twice
// while holding it, holds at every level, and unlocks in reverse order: the
// same checks across every level (a nested Unlock that let the lock go
// would be an overlap), every nested Lock and Unlock must succeed and the
// nested leases carry the grant's token, and the locks are free at the end.
func TestChaosReentrantContention(t *testing.T) {
	chaosParallel(t)
	c := runContention(t, chaosSpec{Kind: "reentrant", Hold: 4 * time.Millisecond, HoldRand: true, Beat: time.Millisecond})
	c.check(t)
	nested := c.h.Count(chaos.Reenter, func(e chaos.Event) bool { return e.Note == "lock" })
	if nested < c.acquired {
		t.Errorf("%d nested locks in %d sections: every section must nest at least one", nested, c.acquired)
	}
	vs := chaos.Reentries(c.h)
	expectNone(t, "nested holds", vs)
	c.publish(t, "reentrant-contention", [2]string{"nested holds", strconv.Itoa(nested)},
		[2]string{"nested holds failed", strconv.Itoa(len(vs))})
}

// TestChaosRWContention is TestChaosContention on RWMutexes, three sections
// in four of them reading (RLock) and the others writing (Lock), with
// holds of a few milliseconds: no writer's hold may overlap any other hold,
// and readers must have held a lock together at least once, or the check
// proved nothing about them. Only writers touch the counters.
func TestChaosRWContention(t *testing.T) {
	chaosParallel(t)
	c := runContention(t, chaosSpec{Kind: "rwmutex", Reads: 75, Hold: 4 * time.Millisecond, HoldRand: true, Beat: time.Millisecond})
	c.check(t)
	isRead := func(e chaos.Event) bool { return e.Note == chaos.ModeRead }
	reads := c.h.Count(chaos.Acquire, func(e chaos.Event) bool { return e.OK && isRead(e) })
	readers := chaos.MostHeld(c.h, isRead)
	if readers < 2 {
		t.Errorf("at most %d readers held a lock at once in %d reads: readers never shared one", readers, reads)
	}
	c.publish(t, "rwmutex-contention", [2]string{"reads", strconv.Itoa(reads)},
		[2]string{"most readers at once", strconv.Itoa(readers)})
}

// TestChaosRenewalRacesRelease runs the contention scenario with holds that
// straddle the renewal period (in the long tier TTL 300 ms, renewed every
// 100 ms, holds of 75–150 ms; in the short tier five times that), so that
// the watchdog renews while holds are held and released, on a Mutex, a
// ReentrantMutex (whose holds share one renewed lease per owner) and an
// RWMutex: the same checks, among them that no renewal follows a release,
// and renewals must have been sent, or that check proved nothing. (The
// other contention scenarios hold for milliseconds under a 1 s TTL and send
// none in the short tier.) A release meets a renewal in flight only now and
// then here; TestNoRenewalAfterUnlock and
// TestReentrantNoRenewalFollowsTheLastRelease test that race directly.
func TestChaosRenewalRacesRelease(t *testing.T) {
	chaosParallel(t)
	for _, kind := range []string{"", "reentrant", "rwmutex"} {
		kind := kind
		name := kind
		if name == "" {
			name = "mutex"
		}
		t.Run(name, func(t *testing.T) {
			// The short tier runs beside the whole suite on a loaded
			// machine, where a process can wait for a core for hundreds of
			// milliseconds and a short TTL lapses meanwhile: a lost lease
			// is a failure here, so its times are five times longer there
			// (a lease survives a stall of about 1 s), with fewer sections.
			c := runContention(t, chaosSpec{Kind: kind, Reads: 50, TTL: chaos.Pick(1500*time.Millisecond, 300*time.Millisecond),
				Sections: chaos.Pick(3, 20), Hold: chaos.Pick(750*time.Millisecond, 150*time.Millisecond), HoldRand: true, Beat: 10 * time.Millisecond})
			c.check(t)
			renewals := c.h.Count(chaos.Cmd, func(e chaos.Event) bool { return e.Note == "renew" })
			if renewals == 0 {
				t.Errorf("no renewal was sent in %d sections: the check that none follows a release proved nothing", c.acquired)
			}
			t.Logf("%d sections, %d renewals", c.acquired, renewals)
		})
	}
}

// contention is a run of critical sections on a few locks, from goroutines
// of this process and of several child processes, with no faults, and
// what it recorded.
type contention struct {
	started  time.Time
	seed     int64
	srv      *redistest.Server
	names    []string
	children int
	childGos int
	localGos int
	perGo    int
	h        chaos.History
	// Set by check.
	vs         []chaos.Violation
	acquired   int
	fencedLost int
	refused    int
}

// runContention runs the sections spec describes (its Kind and holds, and
// its TTL and sections per goroutine when set; the servers, locks, counters
// and hooks are set here) in every worker,
// probing every key meanwhile, and returns the history, with the final
// value of every unfenced counter and a last probe of every key.
func runContention(t *testing.T, spec chaosSpec) *contention {
	t.Helper()
	c := &contention{
		started:  time.Now(),
		seed:     chaos.Seed(t),
		srv:      redistest.Start(t),
		children: chaos.Pick(2, 4),
		childGos: chaos.Pick(2, 4),
		localGos: chaos.Pick(4, 4),
		perGo:    chaos.Pick(60, 500),
	}
	if spec.Sections > 0 {
		c.perGo = spec.Sections
	}
	r := chaos.Rand(c.seed)
	var (
		rec chaos.Recorder
		ctx = testCtx(t)
	)
	if chaos.Long() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
	}
	for i := 0; i < chaos.Pick(2, 4); i++ {
		c.names = append(c.names, fmt.Sprintf("%s-%d", t.Name(), i))
	}
	spec.Addrs, spec.Locks = []string{c.srv.Addr()}, c.names
	if spec.TTL == 0 {
		spec.TTL = time.Second
	}
	spec.Counter, spec.Fenced, spec.Hooks = true, true, true

	probeCtx, stopProbe := context.WithCancel(ctx)
	var probing sync.WaitGroup
	probing.Add(1)
	go func() {
		defer probing.Done()
		probe(probeCtx, c.srv.Client(t), &rec, "dlock:*", 20*time.Millisecond)
	}()

	var kids []*chaosChild
	for i := 0; i < c.children; i++ {
		s := spec
		s.Proc, s.Goroutines, s.Sections, s.Seed = fmt.Sprintf("p%d", i+1), c.childGos, c.perGo, r.Int63()
		kids = append(kids, startChaosChild(t, s, &rec))
	}
	local := spec
	local.Proc, local.Goroutines, local.Sections, local.Seed = "p0", c.localGos, c.perGo, r.Int63()
	if err := runChaosWorker(ctx, local, &rec); err != nil {
		t.Fatal(err)
	}
	for _, k := range kids {
		k.wait(chaos.Pick(2*time.Minute, 15*time.Minute))
	}
	stopProbe()
	probing.Wait()
	rdb := c.srv.Client(t)
	for _, n := range c.names {
		recordFinal(t, rdb, &rec, n)
	}
	probeAll(t, rdb, &rec, "dlock:*")
	c.h = rec.History()
	return c
}

// check asserts what holds for every kind of lock under contention: every
// section acquired its lock and released it, the checkers of chaos.All
// find nothing (overlapping holds, lost updates, stale fenced writes,
// token regressions, keys without a TTL, renewals after a release...),
// every accepted fenced increment is in its counter and none was refused,
// and at the end nobody holds or waits for any of the locks.
func (c *contention) check(t *testing.T) {
	t.Helper()
	h := c.h
	sections := (c.children*c.childGos + c.localGos) * c.perGo
	c.acquired = h.Count(chaos.Acquire, func(e chaos.Event) bool { return e.OK })
	if c.acquired != sections {
		t.Errorf("%d of %d critical sections acquired their lock", c.acquired, sections)
	}
	if failed := h.Count(chaos.Release, func(e chaos.Event) bool { return !e.OK }); failed != 0 {
		t.Errorf("%d releases failed without any fault", failed)
	}
	c.vs = chaos.All(h, 1, 0)
	expectNone(t, "contention", c.vs)

	// The fenced counters: every accepted increment is in the value, and
	// with no faults nothing is refused.
	ctx := testCtx(t)
	rdb := c.srv.Client(t)
	for _, n := range c.names {
		accepted := h.Count(chaos.Write, func(e chaos.Event) bool { return e.Lock == n && e.OK })
		c.refused += h.Count(chaos.Write, func(e chaos.Event) bool { return e.Lock == n && !e.OK })
		v, _ := rdb.Get(ctx, chaosFencedKey(n)).Result()
		if got, _ := strconv.Atoi(v); got != accepted {
			c.fencedLost += accepted - got
			t.Errorf("lock %s: fenced counter %d after %d accepted increments", n, got, accepted)
		}
	}
	if c.refused != 0 {
		t.Errorf("%d fenced increments refused without any fault", c.refused)
	}

	client := newClient(t, c.srv)
	for _, n := range c.names {
		infos, err := client.Inspect(ctx, n)
		if err != nil {
			t.Fatalf("Inspect(%q): %v", n, err)
		}
		for _, info := range infos {
			if len(info.Holders) > 0 || len(info.Waiters) > 0 {
				t.Errorf("lock %s (%s) still has holders %+v and waiters %+v after the run", n, info.Kind, info.Holders, info.Waiters)
			}
		}
	}
}

// publish publishes the run's figures as section id, with extra columns
// (header, value) after the ones every contention scenario has.
func (c *contention) publish(t *testing.T, id string, extra ...[2]string) {
	t.Helper()
	by := chaos.ByCheck(c.vs)
	header := []string{"critical sections", "processes × goroutines", "locks", "overlapping holds", "lost updates (unfenced)", "lost updates (fenced)", "fenced writes refused", "keys without TTL", "token regressions", "renewals after Unlock"}
	row := []string{
		strconv.Itoa(c.acquired),
		fmt.Sprintf("%d × %d + 1 × %d", c.children, c.childGos, c.localGos),
		strconv.Itoa(len(c.names)),
		strconv.Itoa(by[chaos.CheckOverlap]),
		strconv.Itoa(by[chaos.CheckLostUpdate]),
		strconv.Itoa(c.fencedLost),
		strconv.Itoa(c.refused),
		strconv.Itoa(by[chaos.CheckNoTTL]),
		strconv.Itoa(by[chaos.CheckTokenOrder]),
		strconv.Itoa(by[chaos.CheckRenewAfter]),
	}
	for _, col := range extra {
		header, row = append(header, col[0]), append(row, col[1])
	}
	var wait chaos.Durations
	for _, e := range c.h.Of(chaos.Acquire) {
		wait.Add(time.Duration(e.T - e.T0))
	}
	s := chaos.NewSection(id)
	s.Printf("%s", seedLine(t, c.seed, c.started))
	s.Table(header, [][]string{row})
	s.Printf("\nWait for the lock (Lock call to grant), all sections: %s. %d keys probed %d times.\n",
		wait.Summary(), distinctKeys(c.h), c.h.Count(chaos.Probe, nil))
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
	chaosParallel(t)
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
	peak := chaos.MostHeld(h, nil)
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
