//go:build linux

package dlock_test

import (
	"fmt"
	"math/rand"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/chaos"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestChaosWatchdogHealthy holds many leases for several TTLs each, from
// several Clients (and, in the long tier, processes), with renewals due
// every TTL/3 and Unlocks landing anywhere in the renewal cycle: no lease
// may be lost while Redis is healthy, and no renewal may be sent after its
// lease's release.
func TestChaosWatchdogHealthy(t *testing.T) {
	chaosParallel(t)
	started := time.Now()
	seed := chaos.Seed(t)
	r := chaos.Rand(seed)
	srv := redistest.Start(t)
	var (
		rec chaos.Recorder
		// Short under -race on a loaded machine: a renewal must get
		// through within two thirds of the TTL, so the short tier gives it
		// more room.
		ttl      = chaos.Pick(time.Second, 300*time.Millisecond)
		workers  = 2
		children = chaos.Pick(0, 2)
		gos      = 8
		sections = chaos.Pick(2, 10)
		ctx      = testCtx(t)
		names    []string
	)
	for i := 0; i < 4*gos; i++ {
		names = append(names, fmt.Sprintf("%s-%d", t.Name(), i))
	}
	spec := chaosSpec{
		Addrs: []string{srv.Addr()}, Locks: names, TTL: ttl, Goroutines: gos, Sections: sections,
		Hold: time.Duration(chaos.Pick(2, 4)) * ttl, HoldRand: true, Beat: 20 * time.Millisecond, Hooks: true,
	}
	var kids []*chaosChild
	for i := 0; i < children; i++ {
		s := spec
		s.Proc, s.Seed = fmt.Sprintf("p%d", i+1), r.Int63()
		kids = append(kids, startChaosChild(t, s, &rec))
	}
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for i := 0; i < workers; i++ {
		s := spec
		s.Proc, s.Seed = fmt.Sprintf("p0.%d", i), r.Int63()
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = runChaosWorker(ctx, s, &rec)
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range kids {
		k.wait(5 * time.Minute)
	}
	probeAll(t, srv.Client(t), &rec, "dlock:*")
	h := rec.History()
	vs := chaos.All(h, 1, 0)
	expectNone(t, "healthy watchdog", vs)
	lost := h.Of(chaos.Lost)
	for _, e := range lost {
		t.Errorf("lease lost while Redis was healthy: %s", e)
	}
	holds := h.Count(chaos.Acquire, func(e chaos.Event) bool { return e.OK })
	renewals := h.Count(chaos.Cmd, func(e chaos.Event) bool { return e.Note == "renew" })
	if renewals == 0 || h.Count(chaos.Cmd, func(e chaos.Event) bool { return e.Note == "release" }) == 0 {
		t.Error("the go-redis hook recorded no renewal or release: the renewal-after-Unlock check proved nothing")
	}
	var held chaos.Durations
	for _, e := range h.Of(chaos.Release) {
		held.Add(time.Duration(e.T0 - acquiredAt(h, e.Hold)))
	}

	s := chaos.NewSection("watchdog-healthy")
	s.Printf("%s", seedLine(t, seed, started))
	s.Table([]string{"leases", "renewals", "premature losses", "renewals after Unlock", "overlapping holds"},
		[][]string{{strconv.Itoa(holds), strconv.Itoa(renewals), strconv.Itoa(len(lost)),
			strconv.Itoa(chaos.ByCheck(vs)[chaos.CheckRenewAfter]), strconv.Itoa(chaos.ByCheck(vs)[chaos.CheckOverlap])}})
	s.Printf("\nTTL %v (renewal every %v), leases held %s, from %d Clients in %d processes × %d goroutines.\n",
		ttl, ttl/3, held.Summary(), workers+children, 1+children, gos)
	publish(t, s)
}

// acquiredAt returns when hold's acquisition returned.
func acquiredAt(h chaos.History, hold string) int64 {
	for _, e := range h {
		if e.Kind == chaos.Acquire && e.Hold == hold {
			return e.T
		}
	}
	return 0
}

// blackholeTrial is what one blackholed-holder trial measured.
type blackholeTrial struct {
	name     string
	lateness time.Duration // loss seen after the local validity deadline; -1: no loss
	afterBH  time.Duration // loss seen after the blackhole began
	gap      time.Duration // the successor's grant after the holder's last belief
}

// runBlackholeTrial takes lock name through a proxy that holds the reply
// of the grant for heldReply, then blackholes the holder (its renewals
// vanish) while a successor polls for the lock directly. The holder must
// see its loss at its validity deadline, before the successor gets the
// lock: counting that deadline from the request, not from the reply, is
// what keeps it before the server's expiry.
func runBlackholeTrial(t *testing.T, srv *redistest.Server, rec *chaos.Recorder, r *rand.Rand, name string, ttl, heldReply time.Duration) blackholeTrial {
	t.Helper()
	ctx := testCtx(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	blackholed := make(chan int64, 1)
	holder, err := newChaosWorker(chaosSpec{
		Proc: "holder-" + name, Addrs: []string{proxy.Addr()}, StoreAddr: srv.Addr(), Locks: []string{name},
		TTL: ttl, Sections: 1, Hold: 10 * ttl, Beat: time.Millisecond, StopOnLoss: true, Seed: r.Int63(),
		// A request lost in the blackhole fails after this, rather than
		// go-redis's 3s, so that Unlock (which waits for a renewal in
		// flight) need not wait that long. Longer than heldReply.
		ReadTimeout: 2 * heldReply,
		onLease: func(*dlock.Lease) {
			proxy.Blackhole(true)
			at := chaos.Now()
			rec.Add(chaos.Event{Kind: chaos.Fault, T: at, Note: "blackhole", Lock: name})
			blackholed <- at
		},
		// Healed once the holder has seen its loss, so that its Unlock is
		// not stuck; not before, or a renewal that gets through would tell
		// it what the deadline alone must.
		onLost: func() { proxy.Blackhole(false) },
	}, rec)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.close()
	if err := holder.warm(ctx); err != nil {
		t.Fatal(err)
	}
	if heldReply > 0 {
		proxy.HoldReplies(true)
		time.AfterFunc(heldReply, func() { proxy.HoldReplies(false) })
	}
	holderDone := make(chan struct{})
	go func() {
		defer close(holderDone)
		holder.run(ctx)
	}()
	var bhAt int64
	select {
	case bhAt = <-blackholed:
	case <-holderDone:
		t.Fatalf("%s: the holder did not get the lock", name)
	}
	err = runChaosWorker(ctx, chaosSpec{
		Proc: "successor-" + name, Addrs: []string{srv.Addr()}, Locks: []string{name}, TTL: ttl,
		Sections: 1, Try: true, Spin: time.Millisecond, Hold: 20 * time.Millisecond, Beat: 5 * time.Millisecond,
		Seed: r.Int63(),
	}, rec)
	if err != nil {
		t.Fatal(err)
	}
	<-holderDone

	res := blackholeTrial{name: name, lateness: -1}
	var lastHeld, succAt int64
	for _, e := range rec.History() {
		switch {
		case e.Kind == chaos.Lost && e.Lock == name:
			res.lateness = time.Duration(e.T - e.Deadline)
			res.afterBH = time.Duration(e.T - bhAt)
		case e.Kind == chaos.Acquire && e.Lock == name && e.Proc == "successor-"+name:
			succAt = e.T
		}
	}
	for _, e := range rec.History() {
		if e.Kind == chaos.Held && e.Proc == "holder-"+name && e.T > lastHeld {
			lastHeld = e.T
		}
	}
	res.gap = time.Duration(succAt - lastHeld)
	return res
}

// TestChaosWatchdogBlackhole cuts a holder off from Redis (its renewals
// vanish in a blackhole) right after a grant whose reply was held back by
// the network: the holder must see its loss at its local validity
// deadline, before anyone else can get the lock.
func TestChaosWatchdogBlackhole(t *testing.T) {
	chaosParallel(t)
	started := time.Now()
	seed := chaos.Seed(t)
	r := chaos.Rand(seed)
	srv := redistest.Start(t)
	var (
		rec       chaos.Recorder
		trials    = chaos.Pick(2, 50)
		ttl       = 1500 * time.Millisecond
		heldReply = 300 * time.Millisecond
		// The target is 50ms; the short tier, under -race next to other
		// tests, allows a loaded scheduler more.
		slack = chaos.Pick(500*time.Millisecond, 50*time.Millisecond)
	)
	var lateness, afterBH, gaps chaos.Durations
	late := 0
	for i := 0; i < trials; i++ {
		res := runBlackholeTrial(t, srv, &rec, r, fmt.Sprintf("%s-%d", t.Name(), i), ttl, heldReply)
		if res.lateness < 0 {
			t.Fatalf("%s: the blackholed holder never saw its loss", res.name)
		}
		lateness.Add(res.lateness)
		afterBH.Add(res.afterBH)
		gaps.Add(res.gap)
		if res.lateness > slack {
			late++
		}
	}
	h := rec.History()
	vs := append(chaos.All(h, 1, int64(slack)), chaos.LateLosses(h, int64(slack))...)
	expectNone(t, "blackholed holder", vs)
	strict := chaos.Overlaps(h, 1, 0)

	s := chaos.NewSection("watchdog-blackhole")
	s.Printf("%s", seedLine(t, seed, started))
	s.Table([]string{"trials", "loss seen after the validity deadline", "over 50 ms", "loss seen after the blackhole began", "successor's grant after the holder's last belief", "beliefs overlapping the successor"},
		[][]string{{strconv.Itoa(len(lateness)), lateness.Summary(), strconv.Itoa(late), afterBH.Summary(), gaps.Summary(), strconv.Itoa(len(strict))}})
	s.Printf("\nTTL %v; the grant's reply held back %v by the proxy; then every byte to and from Redis dropped. The successor polls TryLock every 1 ms on a direct connection.\n", ttl, heldReply)
	publish(t, s)
}
