package dlock_test

import (
	"context"
	"math/rand"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestSoakHiccups is the mix under Redis hiccups: replies held back and
// dropped, latency, connection resets, with every cycle bounded by a short
// deadline, so that calls are abandoned in flight and cleaned up later.
// Once the faults stop, the clean-ups end and the linger passes, nothing
// may be left: in memory, in goroutines, on the server.
func TestSoakHiccups(t *testing.T) {
	cycles := soakCycles(t, 1500) / 2
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	admin := srv.Client(t)
	ctx := testCtx(t)
	if cycles > 10000 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
	}
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	opts := []dlock.Option{dlock.WithTTL(2 * time.Second), dlock.WithReleaseTimeout(time.Second)}
	goBefore := settledGoroutines(0)
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	rival, err := dlock.New(srv.Client(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer rival.Close()
	dlock.SetSubscriptionLinger(c, soakLinger)
	dlock.SetSubscriptionLinger(rival, soakLinger)

	stop := make(chan struct{})
	faulted := make(chan struct{})
	var faults atomic.Int64
	go func() {
		defer close(faulted)
		rnd := rand.New(rand.NewSource(1))
		tick := time.NewTicker(40 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				proxy.HoldReplies(false)
				proxy.Blackhole(false)
				proxy.SetLatency(0)
				return
			case <-tick.C:
			}
			faults.Add(1)
			switch rnd.Intn(5) {
			case 0:
				proxy.HoldReplies(true)
				time.Sleep(time.Duration(rnd.Intn(150)) * time.Millisecond)
				proxy.HoldReplies(false)
			case 1:
				proxy.Blackhole(true)
				time.Sleep(time.Duration(rnd.Intn(100)) * time.Millisecond)
				proxy.Blackhole(false)
			case 2:
				proxy.ResetAll()
			case 3:
				proxy.SetLatency(time.Duration(rnd.Intn(20)) * time.Millisecond)
			default:
				proxy.SetLatency(0)
			}
		}
	}()

	var ops soakOps
	prefix := "order:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	start := time.Now()
	runSoakCycles(ctx, 8, cycles, func(i int, rnd *rand.Rand) {
		cctx, cancel := context.WithTimeout(ctx, time.Duration(50+rnd.Intn(250))*time.Millisecond)
		soakCycle(cctx, t, i, c, rival, prefix+strconv.Itoa(i), &ops, rnd)
		cancel()
	})
	close(stop)
	<-faulted
	t.Logf("%d cycles in %v under %d faults: %s", cycles, time.Since(start).Round(time.Millisecond), faults.Load(), &ops)

	awaitNothingRetained(t, 20*time.Second, "the service's Client", func() dlock.Retained { return dlock.ClientRetained(c) },
		"the rival's", func() dlock.Retained { return dlock.ClientRetained(rival) })
	// The proxy's blackhole drops bytes on connections it keeps open, which
	// TCP never does: an UNSUBSCRIBE it swallowed leaves the channel on a
	// subscription connection that lives on (its health check passes once
	// the blackhole ends). What the client wants is what a new connection
	// subscribes to, so one is made: no channel may be left then.
	proxy.ResetAll()
	waitFor(t, 10*time.Second, func() bool {
		return len(admin.PubSubChannels(ctx, "*").Val()) == 0
	}, "channels unsubscribed on the server")
	checkServerKeys(t, admin)
	closeLeavingNoGoroutines(t, goBefore, "the Clients", c, rival)
	waitFor(t, 5*time.Second, func() bool { return countClients(t, admin, true) == 0 }, "subscribed connections closed")
}
