//go:build linux

package dlock_test

import (
	"fmt"
	"math/rand"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/chaos"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestChaosLatch has waiters in this process and in a child process wait
// on a latch while goroutines count it down at random moments, and, in the
// middle of it, Redis forgets its scripts and the waiters' connections
// (their pub/sub subscription included) are reset: no Wait may return
// before the last CountDown was even invoked, and every waiter must be
// released soon after the count reaches zero, even when the message that
// announced it was lost.
func TestChaosLatch(t *testing.T) {
	chaosParallel(t)
	started := time.Now()
	seed := chaos.Seed(t)
	r := chaos.Rand(seed)
	lc := latchChaos{
		srv: redistest.Start(t), count: 6, window: 300 * time.Millisecond,
		// Waiters also poll every WithWaiterLease/3 (1s): a lost message
		// costs at most that. The short tier allows a loaded machine more.
		bound: chaos.Pick(5*time.Second, time.Second+200*time.Millisecond),
	}
	trials := chaos.Pick(3, 30)
	for i := 0; i < trials; i++ {
		lc.trial(t, r, fmt.Sprintf("%s-%d", t.Name(), i))
	}
	probeAll(t, lc.srv.Client(t), &lc.rec, "dlock:*")
	h := lc.rec.History()
	vs := append(chaos.EarlyWaits(h, lc.count), chaos.All(h, 1, 0)...)
	vs = append(vs, chaos.ErrorsContaining(h, "NOSCRIPT")...)
	expectNone(t, "latch", vs)
	waits := h.Count(chaos.Await, func(e chaos.Event) bool { return e.Note == "returned" && e.OK })

	s := chaos.NewSection("latch")
	s.Printf("%s", seedLine(t, seed, started))
	s.Table([]string{"trials", "waits released", "released before the count reached zero", "released after the last CountDown returned"},
		[][]string{{strconv.Itoa(trials), strconv.Itoa(waits), strconv.Itoa(chaos.ByCheck(vs)[chaos.CheckEarlyWait]), lc.delays.Summary()}})
	s.Printf("\nCount %d, counted down by %d goroutines at random moments within %v; 5 waiters in 2 processes behind a proxy. In each trial, at random moments within the same window, SCRIPT FLUSH and a reset of every waiter's connection (pub/sub included). Negative times: the waiter saw zero between the server's last decrement and that CountDown's reply.\n", lc.count, lc.count, lc.window)
	publish(t, s)
}

// latchChaos is TestChaosLatch's server, settings and record: latches of
// count, counted down within window, whose waiters must be released within
// bound of the last CountDown.
type latchChaos struct {
	srv           *redistest.Server
	count         int
	window, bound time.Duration
	rec           chaos.Recorder
	delays        chaos.Durations // from the last CountDown to each release
}

// trial sets the latch name to count, has 5 waiters in this process and a
// child wait on it behind a proxy, and count goroutines count it down
// while a SCRIPT FLUSH and a reset of the waiters' connections come at
// random moments; every waiter must be released, within bound.
func (lc *latchChaos) trial(t *testing.T, r *rand.Rand, name string) {
	ctx := testCtx(t)
	proxy := redistest.StartProxy(t, lc.srv.Addr())
	c := newClient(t, lc.srv)
	if ok, err := c.Latch(name).TrySetCount(ctx, int64(lc.count)); err != nil || !ok {
		t.Fatalf("TrySetCount: %v, %v", ok, err)
	}
	child := startChaosChild(t, chaosSpec{
		Kind: "latch-wait", Proc: "w1-" + name, Addrs: []string{proxy.Addr()}, Locks: []string{name},
		Goroutines: 3, Sections: 1, Seed: r.Int63(),
	}, &lc.rec)
	var wg sync.WaitGroup
	wg.Add(1)
	localSeed := r.Int63()
	go func() {
		defer wg.Done()
		if err := runChaosWorker(ctx, chaosSpec{
			Kind: "latch-wait", Proc: "w0-" + name, Addrs: []string{proxy.Addr()}, Locks: []string{name},
			Goroutines: 2, Sections: 1, Seed: localSeed,
		}, &lc.rec); err != nil {
			t.Error(err)
		}
	}()
	waitFor(t, 30*time.Second, func() bool {
		return lc.rec.History().Count(chaos.Await, func(e chaos.Event) bool { return e.Lock == name && e.Note == "invoked" }) == 5
	}, "5 waiters")
	time.Sleep(50 * time.Millisecond) // let them subscribe

	flushAt := time.Duration(r.Int63n(int64(lc.window)))
	resetAt := time.Duration(r.Int63n(int64(lc.window)))
	faults := make(chan struct{})
	go func() {
		defer close(faults)
		first, second := flushAt, resetAt
		if second < first {
			first, second = second, first
		}
		time.Sleep(first)
		fault(t, &lc.rec, lc.srv, proxy, name, first == flushAt)
		time.Sleep(second - first)
		fault(t, &lc.rec, lc.srv, proxy, name, first != flushAt)
	}()
	if err := runChaosWorker(ctx, chaosSpec{
		Kind: "latch-countdown", Proc: "c-" + name, Addrs: []string{lc.srv.Addr()}, Locks: []string{name},
		Goroutines: lc.count, Sections: 1, Hold: lc.window, Seed: r.Int63(),
	}, &lc.rec); err != nil {
		t.Fatal(err)
	}
	<-faults
	child.wait(60 * time.Second)
	wg.Wait()
	lc.checkReleases(t, name)
}

// checkReleases fails t for a waiter of name that failed, or was released
// later than bound after the last CountDown, and records each delay.
func (lc *latchChaos) checkReleases(t *testing.T, name string) {
	var last int64
	for _, e := range lc.rec.History() {
		if e.Kind == chaos.CountDown && e.Lock == name && e.T > last {
			last = e.T
		}
	}
	for _, e := range lc.rec.History() {
		if e.Kind != chaos.Await || e.Lock != name || e.Note != "returned" {
			continue
		}
		if !e.OK {
			t.Errorf("%s: a waiter failed: %s", name, e.Err)
			continue
		}
		d := time.Duration(e.T - last)
		lc.delays.Add(d)
		if d > lc.bound {
			t.Errorf("%s: a waiter was released %v after the count reached zero, want within %v", name, d, lc.bound)
		}
	}
}

// fault injects SCRIPT FLUSH (flush) or resets the waiters' connections.
func fault(t *testing.T, rec *chaos.Recorder, srv *redistest.Server, proxy *redistest.Proxy, name string, flush bool) {
	if flush {
		srv.FlushScripts(t)
		rec.Add(chaos.Event{Kind: chaos.Fault, Note: "flush", Lock: name})
		return
	}
	proxy.ResetAll()
	rec.Add(chaos.Event{Kind: chaos.Fault, Note: "reset", Lock: name})
}
