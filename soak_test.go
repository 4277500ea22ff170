package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// Soak tests: a long-running service locks per-entity names (millions of
// distinct names over time), with contention on some, cancellations,
// timeouts and connection resets. What it keeps in memory, in goroutines,
// and on the server must come back to a small baseline once the work is
// done and the subscription linger has passed.
//
// By default they run a few thousand cycles; DLOCK_SOAK=<cycles> (or
// DLOCK_SOAK=long, 200000) runs a real soak and logs its measurements.

const soakEnv = "DLOCK_SOAK"

// soakCycles is how many names a soak test goes through.
func soakCycles(t *testing.T, short int) int {
	switch v := os.Getenv(soakEnv); v {
	case "":
		return short
	case "long":
		return 200000
	default:
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a number of cycles or long", soakEnv, v)
		}
		return n
	}
}

// soakLinger is the subscription linger the soak tests give their Clients.
const soakLinger = 50 * time.Millisecond

// soakOps counts how the cycles went, to show the mix was what was meant.
type soakOps struct {
	locked, cancelled, timedOut, tryFailed, waitedAndGot, resets atomic.Int64
}

func (o *soakOps) String() string {
	return fmt.Sprintf("locked %d, waited and got %d, cancelled %d, timed out %d, TryLock failed %d, resets %d",
		o.locked.Load(), o.waitedAndGot.Load(), o.cancelled.Load(), o.timedOut.Load(), o.tryFailed.Load(), o.resets.Load())
}

// soakCycle runs one cycle of the mix on name: c is the service's Client,
// rival another process's.
func soakCycle(ctx context.Context, t *testing.T, i int, c, rival *dlock.Client, name string, ops *soakOps, rnd *rand.Rand) {
	ignore := func(err error) {
		switch {
		case err == nil:
		case errors.Is(err, dlock.ErrNotObtained):
			if errors.Is(err, context.DeadlineExceeded) {
				ops.timedOut.Add(1)
			} else if errors.Is(err, context.Canceled) {
				ops.cancelled.Add(1)
			} else {
				ops.tryFailed.Add(1)
			}
		case errors.Is(err, dlock.ErrNotHeld), errors.Is(err, dlock.ErrLockLost):
			// a reset lost the release's reply, or the lease
		default:
			// a reset: transient failures are expected
		}
	}
	unlock := func(l *dlock.Lease, err error) {
		if err == nil {
			ops.locked.Add(1)
			ignore(l.Unlock(ctx))
		} else {
			ignore(err)
		}
	}
	switch i % 16 {
	case 0: // held by another process: a waiter gets it, one times out, a TryLock fails
		held, err := rival.Mutex(name).Lock(ctx)
		if err != nil {
			ignore(err)
			return
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			l, err := c.Mutex(name).Lock(ctx)
			if err == nil {
				ops.waitedAndGot.Add(1)
			}
			unlock(l, err)
		}()
		limit := time.Duration(1+rnd.Intn(20)) * time.Millisecond
		go func() {
			defer wg.Done()
			tctx, cancel := context.WithTimeout(ctx, limit)
			defer cancel()
			unlock(c.Mutex(name).Lock(tctx))
		}()
		unlock(c.Mutex(name).TryLock(ctx))
		time.Sleep(time.Duration(rnd.Intn(3)) * time.Millisecond) // let the waiters queue, or not
		ignore(held.Unlock(ctx))
		wg.Wait()
	case 1: // cancelled mid-flight
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(time.Duration(rnd.Intn(1500))*time.Microsecond, cancel)
		unlock(c.Mutex(name).Lock(cctx))
		cancel()
	case 2: // goroutines of the service contend locally, one gives up
		var wg sync.WaitGroup
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				lctx := ctx
				if g == 2 {
					var cancel context.CancelFunc
					lctx, cancel = context.WithTimeout(ctx, time.Millisecond)
					defer cancel()
				}
				unlock(c.Mutex(name).Lock(lctx))
			}(g)
		}
		wg.Wait()
	case 3: // a reentrant owner nests
		rctx := dlock.WithOwner(ctx, "job-"+name)
		m := c.ReentrantMutex(name)
		outer, err := m.Lock(rctx)
		if err != nil {
			ignore(err)
			return
		}
		for k := 0; k < 3; k++ {
			unlock(m.Lock(rctx))
		}
		unlock(outer, nil)
	case 4: // a semaphore, one more acquirer than permits
		s := c.Semaphore(name, 2)
		var wg sync.WaitGroup
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				actx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
				defer cancel()
				p, err := s.Acquire(actx, 1)
				if err == nil {
					ops.locked.Add(1)
					ignore(p.Release(ctx))
				} else {
					ignore(err)
				}
			}()
		}
		wg.Wait()
	case 5: // readers and a writer
		rw := c.RWMutex(name)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); unlock(rw.RLock(ctx)) }()
		go func() { defer wg.Done(); unlock(rw.Lock(ctx)) }()
		unlock(rw.TryRLock(ctx))
		wg.Wait()
	case 6: // a fair mutex held by another process, with a waiter that times out
		held, err := rival.FairMutex(name).Lock(ctx)
		if err != nil {
			ignore(err)
			return
		}
		done := make(chan struct{})
		limit := time.Duration(1+rnd.Intn(10)) * time.Millisecond
		go func() {
			defer close(done)
			tctx, cancel := context.WithTimeout(ctx, limit)
			defer cancel()
			unlock(c.FairMutex(name).Lock(tctx))
		}()
		time.Sleep(time.Duration(rnd.Intn(3)) * time.Millisecond)
		ignore(held.Unlock(ctx))
		<-done
	case 7:
		ignore(c.Do(ctx, name, func(context.Context) error { return nil }))
	default:
		if i%2 == 0 {
			unlock(c.Mutex(name).TryLock(ctx))
		} else {
			unlock(c.Mutex(name).Lock(ctx))
		}
	}
}

// TestSoakDistinctNames runs the mix over distinct names on a Client
// behind a proxy that resets every connection now and then, and checks
// that what the Client retains, its goroutines, its heap and the server's
// keys and subscriptions come back once the linger has passed, and after
// Close.
func TestSoakDistinctNames(t *testing.T) {
	cycles := soakCycles(t, 3000)
	srv := redistest.Start(t) // a server of its own: its keys and channels are this test's
	proxy := redistest.StartProxy(t, srv.Addr())
	admin := srv.Client(t)
	ctx := testCtx(t)
	if cycles > 10000 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
	}

	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	rivalRdb := srv.Client(t)
	opts := []dlock.Option{dlock.WithTTL(2 * time.Second), dlock.WithReleaseTimeout(2 * time.Second)}

	goBefore := settledGoroutines(0)
	heapBefore := liveHeap()

	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	rival, err := dlock.New(rivalRdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer rival.Close()
	dlock.SetSubscriptionLinger(c, soakLinger)
	dlock.SetSubscriptionLinger(rival, soakLinger)

	var (
		ops  soakOps
		next atomic.Int64
		wg   sync.WaitGroup
	)
	const workers = 8
	start := time.Now()
	prefix := "order:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rnd := rand.New(rand.NewSource(seed))
			for {
				i := int(next.Add(1)) - 1
				if i >= cycles || ctx.Err() != nil {
					return
				}
				if i > 0 && i%997 == 0 {
					proxy.ResetAll()
					ops.resets.Add(1)
				}
				soakCycle(ctx, t, i, c, rival, prefix+strconv.Itoa(i), &ops, rnd)
			}
		}(int64(w))
	}
	wg.Wait()
	elapsed := time.Since(start)
	t.Logf("%d cycles in %v: %s", cycles, elapsed.Round(time.Millisecond), &ops)

	// Once nothing is held or waited for and the linger has passed, every
	// per-name record goes.
	var got dlock.Retained
	deadline := time.Now().Add(10 * time.Second)
	for {
		got = dlock.ClientRetained(c)
		r := dlock.ClientRetained(rival)
		if got.Channels+got.Waiters+got.Expected+got.Queues+got.Anchors+got.Leases+got.LossFuncs == 0 &&
			r.Channels+r.Waiters+r.Expected+r.Queues+r.Anchors+r.Leases+r.LossFuncs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("10 s after the last cycle the service's Client retains %+v, the rival's %+v; want nothing", got, r)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("retained after the linger: %+v", got)

	// The server: no channel left subscribed, no key without an expiry.
	waitUntil(t, 10*time.Second, "channels unsubscribed on the server", func() bool {
		return len(admin.PubSubChannels(ctx, "*").Val()) == 0
	})
	keys, noTTL := 0, []string{}
	iter := admin.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		keys++
		if admin.PTTL(ctx, iter.Val()).Val() < 0 && admin.Exists(ctx, iter.Val()).Val() == 1 {
			noTTL = append(noTTL, iter.Val())
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(noTTL) > 0 {
		t.Errorf("%d keys without an expiry, such as %q", len(noTTL), noTTL[:min(5, len(noTTL))])
	}
	t.Logf("server: %d keys left (all expiring), %d clients connected", keys, countClients(t, admin, false))

	heapAfter := liveHeap()
	goAfter := ourGoroutines()
	t.Logf("open Client: live heap %d KiB before, %d KiB after (%+d B per cycle); goroutines %d before, %d after",
		heapBefore>>10, heapAfter>>10, (int64(heapAfter)-int64(heapBefore))/int64(cycles), goBefore, goAfter)

	// Close gives everything back: goroutines (the workers' idle ones
	// included) and the subscription's connection.
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := rival.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if n := settledGoroutines(goBefore); n > goBefore {
		t.Errorf("%d goroutines after Close, %d before the Clients:\n%s", n, goBefore, goroutineDump())
	}
	waitUntil(t, 5*time.Second, "subscribed connections closed", func() bool { return countClients(t, admin, true) == 0 })
	heapClosed := liveHeap()
	t.Logf("after Close: live heap %d KiB; goroutines %d", heapClosed>>10, ourGoroutines())
}

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// settledGoroutines waits up to 30 s (the workers' idle period, twice, and
// some) for the count of goroutines (ourGoroutines) to fall to want, and
// returns it; with want 0, it waits briefly for it to stop moving.
func settledGoroutines(want int) int {
	deadline := time.Now().Add(30 * time.Second)
	if want == 0 {
		deadline = time.Now().Add(200 * time.Millisecond)
	}
	n := ourGoroutines()
	for time.Now().Before(deadline) && (want == 0 || n > want) {
		time.Sleep(20 * time.Millisecond)
		n = ourGoroutines()
	}
	return n
}

// ourGoroutines counts the goroutines but the test harness's (the
// redis-server processes and the proxy, whose goroutines come and go with
// the connections it carries).
func ourGoroutines() int {
	n := 0
	for _, g := range strings.Split(goroutineDump(), "\n\n") {
		if !strings.Contains(g, "dlock/internal/redistest.") {
			n++
		}
	}
	return n
}

func goroutineDump() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// countClients counts the server's client connections, besides the one
// asking; with subscribed, only those subscribed to some channel.
func countClients(t *testing.T, admin *redis.Client, subscribed bool) int {
	list, err := admin.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		if strings.Contains(line, "cmd=client|list") {
			continue
		}
		if !subscribed || !strings.Contains(line, " sub=0 ") || !strings.Contains(line, " ssub=0 ") && strings.Contains(line, " ssub=") {
			n++
		}
	}
	return n
}
