package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
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

	var ops soakOps
	const workers = 8
	start := time.Now()
	prefix := "order:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	runSoakCycles(ctx, workers, cycles, func(i int, rnd *rand.Rand) {
		if i > 0 && i%997 == 0 {
			proxy.ResetAll()
			ops.resets.Add(1)
		}
		soakCycle(ctx, t, i, c, rival, prefix+strconv.Itoa(i), &ops, rnd)
	})
	elapsed := time.Since(start)
	t.Logf("%d cycles in %v: %s", cycles, elapsed.Round(time.Millisecond), &ops)

	// Once nothing is held or waited for and the linger has passed, every
	// per-name record goes.
	got := awaitNothingRetained(t, 10*time.Second, "the service's Client", func() dlock.Retained { return dlock.ClientRetained(c) },
		"the rival's", func() dlock.Retained { return dlock.ClientRetained(rival) })
	t.Logf("retained after the linger: %+v", got)

	// The server: no channel left subscribed, no key without an expiry.
	waitFor(t, 10*time.Second, func() bool {
		return len(admin.PubSubChannels(ctx, "*").Val()) == 0
	}, "channels unsubscribed on the server")
	checkServerKeys(t, admin)
	t.Logf("server: %d clients connected", countClients(t, admin, false))

	heapAfter := liveHeap()
	goAfter := ourGoroutines()
	t.Logf("open Client: live heap %d KiB before, %d KiB after (%+d B per cycle); goroutines %d before, %d after",
		heapBefore>>10, heapAfter>>10, (int64(heapAfter)-int64(heapBefore))/int64(cycles), goBefore, goAfter)

	// Close gives everything back: goroutines (the workers' idle ones
	// included) and the subscription's connection.
	closeLeavingNoGoroutines(t, goBefore, "the Clients", c, rival)
	waitFor(t, 5*time.Second, func() bool { return countClients(t, admin, true) == 0 }, "subscribed connections closed")
	heapClosed := liveHeap()
	t.Logf("after Close: live heap %d KiB; goroutines %d", heapClosed>>10, ourGoroutines())
}

// A service that builds a Client per request by mistake, over one go-redis
// client, must get back every goroutine and connection of each at Close:
// its subscription's, its watchdog's and its workers'.
func TestSoakClientsCreatedAndClosed(t *testing.T) {
	cycles := max(100, soakCycles(t, 100)/100)
	srv := redistest.Start(t)
	admin := srv.Client(t)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	name := uniqueName(t)
	holder := newClient(t, srv)
	held := mustLock(t, holder, name+"held")
	defer held.Unlock(ctx)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	goBefore := settledGoroutines(0)
	connsBefore := countClients(t, admin, false)
	heapBefore := liveHeap()
	for i := 0; i < cycles; i++ {
		c, err := dlock.New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		// A wait subscribes, a lease is renewed by the watchdog, and a
		// cancelled wait is cleaned up by a worker.
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		if _, err := c.Mutex(name + "held").Lock(wctx); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("Lock of a held lock: %v", err)
		}
		cancel()
		l, err := c.Mutex(name + strconv.Itoa(i)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// Closed with a lease held and a wait in progress.
		kept, err := c.Mutex(name + "kept" + strconv.Itoa(i)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		waiting := make(chan error, 1)
		go func() { _, err := c.Mutex(name + "held").Lock(ctx); waiting <- err }()
		waitFor(t, 10*time.Second, func() bool { return dlock.LocalWaiters(c, name+"held") == 1 }, "the wait")
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := <-waiting; !errors.Is(err, dlock.ErrClosed) {
			t.Fatalf("a wait in progress at Close: %v, want ErrClosed", err)
		}
		<-kept.Done()
		_ = kept.Unlock(ctx) // still releases after Close
	}
	if n := settledGoroutines(goBefore); n > goBefore {
		t.Errorf("%d goroutines after %d Clients were made and closed, %d before:\n%s", n, cycles, goBefore, goroutineDump())
	}
	waitFor(t, 5*time.Second, func() bool { return countClients(t, admin, true) == 0 }, "subscribed connections closed")
	waitFor(t, 5*time.Second, func() bool { return len(admin.PubSubChannels(ctx, "*").Val()) == 0 }, "channels unsubscribed")
	conns := countClients(t, admin, false)
	heapAfter := liveHeap()
	t.Logf("%d Clients made and closed: goroutines %d before, %d after; connections %d before, %d after; live heap %d KiB before, %d KiB after",
		cycles, goBefore, ourGoroutines(), connsBefore, conns, heapBefore>>10, heapAfter>>10)
	if conns > connsBefore+10 { // go-redis's pool (10 per CPU) may grow, no more
		t.Errorf("%d connections to the server after %d Clients, %d before", conns, cycles, connsBefore)
	}
}
