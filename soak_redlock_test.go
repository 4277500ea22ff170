package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestSoakRedlockDistinctNames is TestSoakDistinctNames for a Redlock over
// three nodes behind proxies that reset their connections now and then:
// its local line, listeners and nodes' notifiers must empty once the linger passed.
func TestSoakRedlockDistinctNames(t *testing.T) {
	cycles := soakCycles(t, 1500) / 2
	nodes := redistest.StartNodes(t, 3)
	proxies, addrs := proxied(t, nodes)
	ctx := testCtx(t)
	if cycles > 10000 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
	}
	opts := []dlock.Option{dlock.WithTTL(2 * time.Second), dlock.WithNodeTimeout(200 * time.Millisecond)}
	goBefore := settledGoroutines(0)
	r := newRedlock(t, addrs, opts...)
	rival := newRedlock(t, addrsOf(nodes), opts...)
	dlock.SetRedlockSubscriptionLinger(r, soakLinger)
	dlock.SetRedlockSubscriptionLinger(rival, soakLinger)

	var ops soakOps
	unlock := func(l *dlock.Lease, err error) {
		switch {
		case err == nil:
			ops.locked.Add(1)
			_ = l.Unlock(ctx)
		case errors.Is(err, context.DeadlineExceeded):
			ops.timedOut.Add(1)
		case errors.Is(err, context.Canceled):
			ops.cancelled.Add(1)
		case errors.Is(err, dlock.ErrNotObtained):
			ops.tryFailed.Add(1)
		}
	}
	prefix := "order:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	start := time.Now()
	runSoakCycles(ctx, 4, cycles, func(i int, rnd *rand.Rand) {
		if i > 0 && i%499 == 0 {
			proxies[i%len(proxies)].ResetAll()
			ops.resets.Add(1)
		}
		name := prefix + strconv.Itoa(i)
		switch i % 4 {
		case 0: // held by another process: a waiter gets it, one times out, a TryLock fails
			held, err := rival.Mutex(name).Lock(ctx)
			if err != nil {
				return
			}
			limit := time.Duration(1+rnd.Intn(20)) * time.Millisecond
			var cw sync.WaitGroup
			cw.Add(2)
			go func() {
				defer cw.Done()
				l, err := r.Mutex(name).Lock(ctx)
				if err == nil {
					ops.waitedAndGot.Add(1)
				}
				unlock(l, err)
			}()
			go func() {
				defer cw.Done()
				tctx, cancel := context.WithTimeout(ctx, limit)
				defer cancel()
				unlock(r.Mutex(name).Lock(tctx))
			}()
			unlock(r.Mutex(name).TryLock(ctx))
			time.Sleep(time.Duration(rnd.Intn(5)) * time.Millisecond)
			_ = held.Unlock(ctx)
			cw.Wait()
		case 1: // cancelled mid-flight
			cctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(time.Duration(rnd.Intn(1500))*time.Microsecond, cancel)
			unlock(r.Mutex(name).Lock(cctx))
			cancel()
		case 2: // goroutines of this process take turns (local hand-offs)
			var cw sync.WaitGroup
			for g := 0; g < 3; g++ {
				cw.Add(1)
				go func() { defer cw.Done(); unlock(r.Mutex(name).Lock(ctx)) }()
			}
			cw.Wait()
		default:
			_ = r.Do(ctx, name, func(context.Context) error { return nil })
		}
	})
	t.Logf("%d cycles in %v: %s", cycles, time.Since(start).Round(time.Millisecond), &ops)

	awaitNothingRetained(t, 10*time.Second, "the Redlock", func() dlock.Retained { return dlock.RedlockRetained(r) },
		"the rival", func() dlock.Retained { return dlock.RedlockRetained(rival) })
	for i, s := range nodes {
		admin := s.Client(t)
		waitFor(t, 10*time.Second, func() bool {
			return len(admin.PubSubChannels(ctx, "*").Val()) == 0
		}, fmt.Sprintf("channels unsubscribed on node %d", i))
	}
	closeLeavingNoGoroutines(t, goBefore, "the Redlocks", r, rival)
}
