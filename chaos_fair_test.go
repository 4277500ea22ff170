//go:build linux

package dlock_test

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/chaos"
	"github.com/dlock-go/dlock/internal/redistest"
)

// fairScenario is one fault on a FairMutex queue of four waiters, w0 to w3
// in arrival order, behind a holder.
type fairScenario struct {
	name string
	// how runs w1 (the others run in this process).
	how int
	// persistent servers keep their data over a restart.
	persistent bool
	// holder is the holder's spec, over the waiters' (see newFairQueue).
	holder chaosSpec
	// fault injects the fault into q, whose w1 is faulty; it unlocks the
	// holder (q.unlock) when it sees fit, and returns the procs the grant
	// order check leaves out.
	fault func(q *fairQueue, w1 *fairWaiter) (exempt []string)
	// order: the grant order must be arrival order (less the exempt);
	// otherwise it is only measured.
	order bool
	// overlap: no two holders may overlap; otherwise only measured (a
	// restart that loses a held lock cannot tell its holder at once).
	overlap bool
	// stallBound is the longest stall allowed of the queue.
	stallBound time.Duration
	// longOnly runs it in the long tier only (it only measures).
	longOnly bool
	// ownServer gives it a server of its own (it restarts it).
	ownServer bool
}

// TestChaosFairOrder injects faults into FairMutex queues: a waiter killed,
// stopped with SIGSTOP, cut off, reset, giving up as it is granted, and
// the holder's lease expiring, Redis restarting (with and without its
// append-only file) or flushing its scripts while waiters queue. The
// FairMutex promises arrival order among live waiters, no two holders, and
// that a dead waiter keeps its place only for its waiter lease: the
// grants must follow arrival order less the faulty waiter, no holds may
// overlap, and the queue may stall only as long as the scenario allows.
func TestChaosFairOrder(t *testing.T) {
	chaosParallel(t)
	const ttl = time.Second
	// The waiter lease, and so the claim window. The short tier runs
	// beside the whole suite under -race: a waiter there may go unscheduled
	// for longer than 300 ms and lose its place, which the lease promises,
	// so the order the test asserts would not hold.
	lease := chaos.Pick(time.Second, 300*time.Millisecond)
	started := time.Now()
	seed := chaos.Seed(t)
	r := chaos.Rand(seed)
	trials := chaos.Pick(1, 20)
	shared := redistest.Start(t)
	var rows [][]string
	for _, sc := range fairScenarios(ttl, lease) {
		if sc.longOnly && !chaos.Long() {
			continue
		}
		var st fairStats
		t.Run(sc.name, func(t *testing.T) {
			srv := shared
			if sc.ownServer {
				var opts []redistest.Option
				if sc.persistent {
					opts = append(opts, redistest.WithPersistence())
				}
				srv = redistest.Start(t, opts...)
			}
			for i := 0; i < trials && !t.Failed(); i++ {
				spec := chaosSpec{TTL: ttl, WaiterLease: lease, Hold: 5 * time.Millisecond, Beat: time.Millisecond, LockTimeout: 30 * time.Second}
				st.trial(t, srv, r, sc, spec, i)
			}
		})
		rows = append(rows, []string{sc.name, strconv.Itoa(len(st.stalls)), strconv.Itoa(st.overlaps), strconv.Itoa(st.violations), chaos.Ms(st.stalls.Max()), chaos.Ms(sc.stallBound)})
	}
	s := chaos.NewSection("fair-order")
	s.Printf("%s", seedLine(t, seed, started))
	s.Table([]string{"scenario", "trials", "overlapping holds", "out of arrival order", "longest stall", "allowed"}, rows)
	s.Printf("\nFour waiters queued one after the other behind a holder; w1 is the faulty one. TTL %v, waiter lease (and claim window) %v.\n", ttl, lease)
	publish(t, s)
}

// fairScenarios are TestChaosFairOrder's faults, for locks of ttl whose
// waiters have the waiter lease lease.
func fairScenarios(ttl, lease time.Duration) []fairScenario {
	// A poll refreshes the lease every third of it, up to 10% late.
	poll := lease / 3 * 11 / 10
	slack := chaos.Pick(400*time.Millisecond, 100*time.Millisecond)
	deadBound := lease + poll + slack
	return []fairScenario{
		{
			name: "killed-waiter", how: childProcess, order: true, overlap: true, stallBound: deadBound,
			fault: func(q *fairQueue, w1 *fairWaiter) []string {
				w1.child.kill()
				q.rec.Add(chaos.Event{Kind: chaos.Fault, Note: "kill", Lock: q.name, Proc: w1.proc})
				q.unlock()
				return []string{w1.proc}
			},
		},
		{
			name: "paused-waiter", how: childProcess, order: true, overlap: true, stallBound: deadBound,
			fault: func(q *fairQueue, w1 *fairWaiter) []string {
				w1.child.pause()
				q.rec.Add(chaos.Event{Kind: chaos.Fault, Note: "pause", Lock: q.name, Proc: w1.proc})
				q.unlock()
				time.Sleep(2 * lease) // the pause: its grant expires meanwhile
				q.rec.Add(chaos.Event{Kind: chaos.Fault, Note: "resume", Lock: q.name, Proc: w1.proc})
				w1.child.resume()
				return []string{w1.proc}
			},
		},
		{
			name: "cut-off-waiter", how: behindProxy, order: true, overlap: true, stallBound: deadBound,
			fault: func(q *fairQueue, w1 *fairWaiter) []string {
				w1.proxy.Blackhole(true)
				q.rec.Add(chaos.Event{Kind: chaos.Fault, Note: "blackhole", Lock: q.name, Proc: w1.proc})
				q.unlock()
				time.Sleep(2 * lease) // the partition
				w1.proxy.Blackhole(false)
				return []string{w1.proc}
			},
		},
		{
			// Its connections reset as the lock comes its way: it keeps
			// its place, and hears of its grant by polling if the
			// message was lost.
			name: "reset-waiter", how: behindProxy, order: true, overlap: true, stallBound: poll + slack,
			fault: func(q *fairQueue, w1 *fairWaiter) []string {
				q.unlock()
				<-q.waiters[0].leased
				w1.proxy.ResetAll()
				q.rec.Add(chaos.Event{Kind: chaos.Fault, Note: "reset", Lock: q.name, Proc: w1.proc})
				return nil
			},
		},
		{
			// Granted while it cannot hear, and its Lock cancelled then:
			// the lock must go on to w2 at once, not after a claim window.
			name: "cancelled-when-granted", how: behindProxy, order: true, overlap: true, stallBound: lease / 2,
			fault: func(q *fairQueue, w1 *fairWaiter) []string {
				w1.proxy.HoldReplies(true)
				q.unlock()
				rdb := q.srv.Client(q.t)
				waitFor(q.t, 10*time.Second, func() bool {
					v, _ := rdb.Get(context.Background(), lockKey(q.name)).Result()
					return strings.HasSuffix(v, ";"+w1.proc)
				}, "the grant to w1")
				w1.cancel()
				q.rec.Add(chaos.Event{Kind: chaos.Fault, Note: "cancel", Lock: q.name, Proc: w1.proc})
				w1.proxy.HoldReplies(false)
				return []string{w1.proc}
			},
		},
		{
			// Its Lock cancelled at a random moment around its turn:
			// before, as or after w0 hands it the lock.
			name: "cancelled-around-grant", how: inProcess, order: true, overlap: true, stallBound: lease / 2,
			fault: func(q *fairQueue, w1 *fairWaiter) []string {
				q.unlock()
				<-q.waiters[0].leased
				time.Sleep(time.Duration(q.r.Int63n(int64(10 * time.Millisecond)))) // w0 holds for 5ms
				w1.cancel()
				q.rec.Add(chaos.Event{Kind: chaos.Fault, Note: "cancel", Lock: q.name, Proc: w1.proc})
				return []string{w1.proc}
			},
		},
		{
			// The holder never unlocks: its lease runs out (TTL 300ms, not
			// renewed) with the waiters queued, and the head must get it.
			name: "holder-expires", how: inProcess, order: true, overlap: true, stallBound: 300*time.Millisecond/10 + slack,
			holder: chaosSpec{TTL: 300 * time.Millisecond, NoRenew: true, StopOnLoss: true},
			fault:  func(q *fairQueue, w1 *fairWaiter) []string { return nil },
		},
		{
			name: "script-flush", how: inProcess, order: true, overlap: true, stallBound: slack,
			fault: func(q *fairQueue, w1 *fairWaiter) []string {
				q.srv.FlushScripts(q.t)
				q.rec.Add(chaos.Event{Kind: chaos.Fault, Note: "flush", Lock: q.name})
				q.unlock()
				return nil
			},
		},
		{
			// With appendfsync always nothing is lost: the holder keeps
			// the lock, the waiters their places.
			name: "restart-persistent", how: inProcess, persistent: true, ownServer: true, order: true, overlap: true, stallBound: poll + slack,
			fault: func(q *fairQueue, w1 *fairWaiter) []string {
				q.srv.Restart()
				q.rec.Add(chaos.Event{Kind: chaos.Fault, Note: "restart", Lock: q.name})
				q.unlock()
				return nil
			},
		},
		{
			// Without persistence the lock and its queue are gone: the
			// waiters queue again as they poll, in no promised order, and
			// the holder learns of its loss only from its next renewal or
			// its Unlock (README: a restart without appendfsync always
			// forgets the locks). Measured, not asserted.
			name: "restart-empty", how: inProcess, stallBound: ttl + slack, ownServer: true, longOnly: true,
			fault: func(q *fairQueue, w1 *fairWaiter) []string {
				q.srv.Restart()
				q.rec.Add(chaos.Event{Kind: chaos.Fault, Note: "restart", Lock: q.name})
				q.unlock()
				return nil
			},
		},
	}
}

// fairStats sums a scenario's trials.
type fairStats struct {
	violations, overlaps int
	stalls               chaos.Durations
}

// trial runs trial i of sc: a holder and four waiters w0 to w3 queued in
// that order, w1 run as sc says and faulted by it, with spec (the
// holder's spec over it as sc gives). It fails t where sc asserts.
func (st *fairStats) trial(t *testing.T, srv *redistest.Server, r *rand.Rand, sc fairScenario, spec chaosSpec, i int) {
	var rec chaos.Recorder
	name := fmt.Sprintf("%s-%d", t.Name(), i)
	q := newFairQueue(t, srv, &rec, r, name, spec, sc.holder)
	q.add("w0", inProcess)
	w1 := q.add("w1", sc.how)
	q.add("w2", inProcess)
	q.add("w3", inProcess)
	exempt := sc.fault(q, w1)
	q.finish()
	h := rec.History()
	o := fairOutcomeOf(h, name, exempt...)
	st.stalls.Add(o.stall)
	want := without([]string{"holder", "w0", "w1", "w2", "w3"}, exempt...)
	got := without(o.order, exempt...)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		st.violations++
		if sc.order {
			t.Errorf("trial %d: grant order %v (all grants: %v), want %v", i, got, o.order, want)
		}
	}
	vs := chaos.Overlaps(h, 1, 0)
	st.overlaps += len(vs)
	if sc.overlap {
		expectNone(t, sc.name, vs)
	}
	if o.stall > sc.stallBound {
		t.Errorf("trial %d: the queue stalled %v, want at most %v (grants %v)", i, o.stall, sc.stallBound, o.order)
	}
	t.Logf("trial %d: grants %v, longest stall %v, %d overlapping holds", i, o.order, o.stall, len(vs))
}

// TestChaosFairOrderAcrossProcesses queues every goroutine of several
// processes (child processes and this one, several goroutines each, all
// calling Lock at once) for one FairMutex behind a holder: each goroutine
// must have its own place in the queue, and the grants must follow the
// queue's order in Redis, the arrival order the FairMutex promises, for
// goroutines of one process as for those of different ones.
func TestChaosFairOrderAcrossProcesses(t *testing.T) {
	chaosParallel(t)
	started := time.Now()
	seed := chaos.Seed(t)
	r := chaos.Rand(seed)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	var (
		rec      chaos.Recorder
		trials   = chaos.Pick(1, 20)
		children = chaos.Pick(2, 4)
		gos      = 3
		waiters  = (children + 1) * gos
		out      int
		stalls   chaos.Durations
	)
	for i := 0; i < trials && !t.Failed(); i++ {
		name := fmt.Sprintf("%s-%d", t.Name(), i)
		spec := chaosSpec{TTL: time.Second, Hold: 2 * time.Millisecond, Beat: time.Millisecond}
		q := newFairQueue(t, srv, &rec, r, name, spec, chaosSpec{})
		s := q.spec
		s.Goroutines = gos
		var kids []*chaosChild
		for k := 0; k < children; k++ {
			c := s
			c.Proc, c.Seed = fmt.Sprintf("p%d", k+1), r.Int63()
			kids = append(kids, startChaosChild(t, c, &rec))
		}
		local := s
		local.Proc, local.Seed = "p0", r.Int63()
		done := make(chan error, 1)
		go func() { done <- runChaosWorker(ctx, local, &rec) }()
		waitQueued(t, srv, name, int64(waiters))
		queued, err := rdb.ZRange(ctx, lockKey(name)+":q", 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		q.unlock()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for _, k := range kids {
			k.wait(time.Minute)
		}
		if err := <-q.holderDone; err != nil {
			t.Fatal(err)
		}
		o := fairOutcomeOf(rec.History(), name)
		stalls.Add(o.stall)
		if got := o.owner[1:]; fmt.Sprint(got) != fmt.Sprint(queued) {
			out++
			t.Errorf("trial %d: grants to %v, want the queue's order %v", i, o.order[1:], procsOf(queued))
		}
		perProc := map[string]int{}
		for _, p := range procsOf(queued) {
			perProc[p]++
		}
		for p, n := range perProc {
			if n != gos {
				t.Errorf("trial %d: %s had %d places in the queue, want one per goroutine (%d)", i, p, n, gos)
			}
		}
		t.Logf("trial %d: grants %v, longest stall %v", i, o.order, o.stall)
	}
	vs := chaos.All(rec.History(), 1, 0)
	expectNone(t, "fair order across processes", vs)
	sec := chaos.NewSection("fair-order-processes")
	sec.Printf("%s", seedLine(t, seed, started))
	sec.Table([]string{"trials", "processes × goroutines", "out of the queue's order", "overlapping holds", "longest stall"},
		[][]string{{strconv.Itoa(trials), fmt.Sprintf("%d × %d", children+1, gos), strconv.Itoa(out), strconv.Itoa(len(vs)), chaos.Ms(stalls.Max())}})
	publish(t, sec)
}
