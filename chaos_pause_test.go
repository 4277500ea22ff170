//go:build linux

package dlock_test

import (
	"fmt"
	"math/rand"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/chaos"
	"github.com/dlock-go/dlock/internal/redistest"
)

// pauseTrial is what one paused-holder trial measured.
type pauseTrial struct {
	name      string
	resume    int64         // stamped just before SIGCONT
	learned   time.Duration // the holder's loss seen, after resume; -1: never
	staleTry  int           // the holder's fenced writes invoked after it resumed
	staleOK   int           // ... of which the store accepted
	successor bool          // the successor wrote before the holder resumed
	lateNH    bool          // the holder's late Unlock returned ErrNotHeld
	succOK    bool          // the successor's own Unlock succeeded afterwards
	succErr   string        // its error otherwise
}

// runPauseTrial runs one trial: a child process takes lock name and writes
// the fenced store every 5ms; it is stopped with SIGSTOP for pause (longer
// than its TTL), meanwhile a successor in this process takes the lock and
// writes; then the holder is resumed, and keeps writing until it sees its
// loss, and unlocks. The successor keeps the lock until the holder has
// exited. mutant, if set, is installed in the holder process.
func runPauseTrial(t *testing.T, srv *redistest.Server, rec *chaos.Recorder, r *rand.Rand, name string, ttl, pause time.Duration, mutant string) pauseTrial {
	t.Helper()
	ctx := testCtx(t)
	holder := startChaosChild(t, chaosSpec{
		Proc: "holder-" + name, Addrs: []string{srv.Addr()}, Locks: []string{name}, TTL: ttl,
		Sections: 1, Hold: 20 * ttl, Beat: 5 * time.Millisecond, Fenced: true, StopOnLoss: true,
		Hooks: true, Mutant: mutant, Seed: r.Int63(),
	}, rec)
	holder.waitEvent(func(e chaos.Event) bool { return e.Kind == chaos.Acquire }, 30*time.Second, "acquisition")
	holder.waitEvent(func(e chaos.Event) bool { return e.Kind == chaos.Write }, 10*time.Second, "fenced write")
	// Stop it anywhere in its renewal cycle (every TTL/3).
	time.Sleep(time.Duration(r.Int63n(int64(ttl / 3))))
	holder.pause()
	paused := chaos.Now()
	rec.Add(chaos.Event{Kind: chaos.Fault, T: paused, Note: "pause", Lock: name, Proc: holder.spec.Proc})

	until := make(chan struct{})
	succDone := make(chan error, 1)
	succSeed := r.Int63()
	go func() {
		// The successor's TTL is long enough that its own renewals never
		// lapse on a loaded machine: what the trial checks of it is that
		// the holder's late Unlock leaves its lock alone.
		succDone <- runChaosWorker(ctx, chaosSpec{
			Proc: "successor-" + name, Addrs: []string{srv.Addr()}, Locks: []string{name}, TTL: 20 * ttl,
			Sections: 1, Hold: time.Minute, Beat: 5 * time.Millisecond, Fenced: true, Hooks: true,
			Seed: succSeed, until: until,
		}, rec)
	}()
	time.Sleep(pause - time.Duration(chaos.Now()-paused))
	resume := chaos.Now()
	rec.Add(chaos.Event{Kind: chaos.Fault, T: resume, Note: "resume", Lock: name, Proc: holder.spec.Proc})
	holder.resume()
	holder.wait(30 * time.Second)
	time.Sleep(20 * time.Millisecond) // the successor writes on after the late Unlock
	close(until)
	if err := <-succDone; err != nil {
		t.Fatal(err)
	}

	res := pauseTrial{name: name, resume: resume, learned: -1}
	for _, e := range rec.History() {
		if e.Lock != name {
			continue
		}
		switch {
		case e.Proc == holder.spec.Proc && e.Kind == chaos.Lost && e.T > resume:
			res.learned = time.Duration(e.T - resume)
		case e.Proc == holder.spec.Proc && e.Kind == chaos.Write && e.T0 > resume:
			res.staleTry++
			if e.OK {
				res.staleOK++
			}
		case e.Proc == holder.spec.Proc && e.Kind == chaos.Release:
			res.lateNH = chaos.IsErr(e.Err, chaos.ErrNotHeld)
		case e.Proc != holder.spec.Proc && e.Kind == chaos.Write && e.OK && e.T < resume:
			res.successor = true
		case e.Proc != holder.spec.Proc && e.Kind == chaos.Release:
			res.succOK, res.succErr = e.OK, e.Err
		}
	}
	return res
}

// TestChaosPausedHolder stops a holder process with SIGSTOP for longer than
// its TTL while another takes the lock: the fenced store must refuse every
// write of the paused holder after the successor's, the holder must learn
// of the loss promptly once resumed, and its late Unlock must return
// ErrNotHeld and leave the successor's lock alone.
func TestChaosPausedHolder(t *testing.T) {
	chaosParallel(t)
	started := time.Now()
	seed := chaos.Seed(t)
	r := chaos.Rand(seed)
	srv := redistest.Start(t)
	var (
		rec    chaos.Recorder
		trials = chaos.Pick(3, 100)
		ttl    = 300 * time.Millisecond
		pause  = ttl + chaos.Pick(400*time.Millisecond, 200*time.Millisecond)
		// Generous in the short tier, which runs under -race next to every
		// other test; the long tier measures against the 50ms target.
		learnBound = chaos.Pick(2*time.Second, 50*time.Millisecond)
	)
	var (
		results []pauseTrial
		learned chaos.Durations
	)
	for i := 0; i < trials; i++ {
		res := runPauseTrial(t, srv, &rec, r, fmt.Sprintf("%s-%d", t.Name(), i), ttl, pause, "")
		results = append(results, res)
		if res.learned >= 0 {
			learned.Add(res.learned)
		}
		if t.Failed() {
			break
		}
	}
	probeAll(t, srv.Client(t), &rec, "dlock:*")
	h := rec.History()
	// Paused holders believe they hold until they learn otherwise: that is
	// why the store checks tokens. So no overlap check here, only safety.
	vs := chaos.Safety(h)
	expectNone(t, "paused holder", vs)

	var (
		late, never, notHeld, intact, withSucc, staleTry, staleOK, trialsTried int
	)
	for _, res := range results {
		switch {
		case res.learned < 0:
			never++
			t.Errorf("%s: the holder never saw its loss after resuming", res.name)
		case res.learned > learnBound:
			late++
			if !chaos.Long() {
				t.Errorf("%s: the holder saw its loss %v after resuming, want within %v", res.name, res.learned, learnBound)
			}
		}
		if res.lateNH {
			notHeld++
		} else {
			t.Errorf("%s: the holder's late Unlock did not return ErrNotHeld", res.name)
		}
		if res.succOK {
			intact++
		} else {
			t.Errorf("%s: the successor's Unlock failed after the holder's late Unlock: %s", res.name, res.succErr)
		}
		if res.successor {
			withSucc++
		}
		if res.staleTry > 0 {
			trialsTried++
		}
		staleTry += res.staleTry
		staleOK += res.staleOK
	}
	if chaos.Long() && float64(late) > 0.01*float64(len(results)) {
		t.Errorf("%d of %d paused holders saw their loss later than %v after resuming", late, len(results), learnBound)
	}

	s := chaos.NewSection("paused-holder")
	s.Printf("%s", seedLine(t, seed, started))
	n := len(results)
	s.Table([]string{"trials", "stale fenced ops accepted", "stale fenced ops refused (trials with any)", "loss seen after SIGCONT", "within 50 ms", "late Unlock → ErrNotHeld", "successor's lock intact", "successor wrote during the pause"},
		[][]string{{
			strconv.Itoa(n),
			strconv.Itoa(staleOK + len(vs)),
			fmt.Sprintf("%d (%d)", staleTry-staleOK, trialsTried),
			learned.Summary(),
			fmt.Sprintf("%d/%d", n-late-never, n),
			fmt.Sprintf("%d/%d", notHeld, n),
			fmt.Sprintf("%d/%d", intact, n),
			fmt.Sprintf("%d/%d", withSucc, n),
		}})
	s.Printf("\nTTL %v, holder stopped for %v at a random point of its renewal cycle, writing every 5 ms before and after.\n", ttl, pause)
	publish(t, s)
}

// TestChaosKilledHolder kills a holder process with SIGKILL while another
// waits: the lock must be free again within its TTL plus the waiter's
// retry delay (which for a Mutex is the poll at the holder's expiry, up to
// 10% late for jitter) plus 100ms.
func TestChaosKilledHolder(t *testing.T) {
	chaosParallel(t)
	started := time.Now()
	seed := chaos.Seed(t)
	r := chaos.Rand(seed)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	var (
		rec    chaos.Recorder
		trials = chaos.Pick(2, 100)
		ttl    = 500 * time.Millisecond
		// The target is TTL + retry delay + 100ms; the short tier allows
		// a loaded machine a second more.
		bound = ttl + ttl/10 + 100*time.Millisecond + chaos.Pick(time.Second, 0)
		ctx   = testCtx(t)
	)
	var sinceKill, sinceExpiry chaos.Durations
	over := 0
	for i := 0; i < trials; i++ {
		name := fmt.Sprintf("%s-%d", t.Name(), i)
		holder := startChaosChild(t, chaosSpec{
			Proc: "holder-" + name, Addrs: []string{srv.Addr()}, Locks: []string{name}, TTL: ttl,
			Sections: 1, Hold: time.Minute, Beat: 50 * time.Millisecond, Seed: r.Int63(),
		}, &rec)
		holder.waitEvent(func(e chaos.Event) bool { return e.Kind == chaos.Acquire && e.OK }, 30*time.Second, "acquisition")
		waiterDone := make(chan error, 1)
		waiterSeed := r.Int63()
		go func() {
			waiterDone <- runChaosWorker(ctx, chaosSpec{
				Proc: "waiter-" + name, Addrs: []string{srv.Addr()}, Locks: []string{name}, TTL: ttl,
				Sections: 1, Seed: waiterSeed,
			}, &rec)
		}()
		// Kill it anywhere in its renewal cycle, with the waiter queued.
		time.Sleep(50*time.Millisecond + time.Duration(r.Int63n(int64(ttl/3))))
		pttl := rdb.PTTL(ctx, lockKey(name)).Val()
		killed := chaos.Now()
		holder.kill()
		rec.Add(chaos.Event{Kind: chaos.Fault, T: killed, Note: "kill", Lock: name, Proc: holder.spec.Proc})
		if err := <-waiterDone; err != nil {
			t.Fatal(err)
		}
		for _, e := range rec.History() {
			if e.Kind == chaos.Acquire && e.Lock == name && e.Proc == "waiter-"+name {
				if !e.OK {
					t.Fatalf("%s: the waiter did not get the lock: %s", name, e.Err)
				}
				d := time.Duration(e.T - killed)
				sinceKill.Add(d)
				sinceExpiry.Add(d - pttl)
				if d > bound {
					over++
					t.Errorf("%s: free again %v after the kill, want within %v", name, d, bound)
				}
			}
		}
	}
	expectNone(t, "killed holder", chaos.All(rec.History(), 1, 0))

	s := chaos.NewSection("killed-holder")
	s.Printf("%s", seedLine(t, seed, started))
	s.Table([]string{"trials", "kill → waiter holds the lock", "key's expiry → waiter holds the lock", "over TTL + 10% + 100 ms"},
		[][]string{{strconv.Itoa(len(sinceKill)), sinceKill.Summary(), sinceExpiry.Summary(), strconv.Itoa(over)}})
	s.Printf("\nTTL %v, auto-renewed; the holder is killed at a random point of its renewal cycle with a waiter queued (default NotifyWait).\n", ttl)
	publish(t, s)
}
