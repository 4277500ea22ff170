package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// UncontendedResult is one run of scenario 1: g goroutines sharing one
// client, each locking and unlocking its own key as fast as it can.
type UncontendedResult struct {
	RunInfo
	Target     string
	Goroutines int
	Window     Window
	Pairs      int64 // lock+unlock pairs completed in the window
	Errors     Errors
}

// PairsPerSec is the throughput of the window.
func (r UncontendedResult) PairsPerSec() float64 {
	return float64(r.Pairs) / r.Window.Elapsed.Seconds()
}

// RunUncontended runs scenario 1 for t alone on srv with g goroutines:
// warm-up, then pairs are counted for dur.
func RunUncontended(ctx context.Context, t Target, srv *Servers, g int, warm, dur time.Duration) (UncontendedResult, error) {
	rs, errs, err := RunUncontendedInterleaved(ctx, []Target{t}, srv, g, warm, dur, 1, 0)
	return rs[0], errors.Join(err, errs[0])
}

// RunUncontendedInterleaved runs scenario 1 for every target in ts on srv
// with g goroutines, taking turns: each target warms up for warm, then dur
// is cut into slices windows that the targets run one after another, in
// an order that changes from slice to slice (rotate, from turn on). Each
// goroutine uses its own key, Lock (the waiting call, which finds the key
// free) and then Unlock; a target's result sums its windows.
//
// Why turns: on a shared machine a target's throughput drifts by more
// within a minute than the targets differ at one goroutine, and a
// repetition that ran each target's whole window in a row compared
// targets measured up to half a minute apart. In turns every target
// meets the same drift. Every target's client stays open for the whole
// run (idle between its turns), so no turn pays for dialling.
//
// errs[i] is target i's own failure (its client could not be made); err
// ends the run for all of them (the servers, or ctx).
func RunUncontendedInterleaved(ctx context.Context, ts []Target, srv *Servers, g int, warm, dur time.Duration, slices, turn int) (rs []UncontendedResult, errs []error, err error) {
	rs = make([]UncontendedResult, len(ts))
	errs = make([]error, len(ts))
	for i, t := range ts {
		rs[i] = UncontendedResult{Target: t.Name, Goroutines: g}
	}
	if err := srv.Flush(ctx); err != nil {
		return rs, errs, err
	}
	// Lock gets a context that can be cancelled but has no deadline, as a
	// request's; it is cancelled only if ctx ends. Turns end by a flag
	// checked between pairs, so no Lock is cut off holding its key.
	lockCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()

	// The targets whose client could be made, each with its result.
	var runners []*pairRunner
	for i, t := range ts {
		r := &pairRunner{res: &rs[i]}
		r.l, errs[i] = t.New(Config{Addrs: srv.Addrs, Counter: &r.cnt})
		if errs[i] != nil {
			continue
		}
		defer r.l.Close()
		for k := 0; k < g; k++ {
			r.keys = append(r.keys, fmt.Sprintf("bench:u%d:%d", i, k))
		}
		runners = append(runners, r)
	}
	for _, r := range rotate(runners, turn) {
		r.start(lockCtx)
		err := sleep(ctx, warm)
		r.halt()
		if err != nil {
			return rs, errs, err
		}
	}
	slices = max(slices, 1)
	sliceWarm, sliceDur := TurnWarm(warm), dur/time.Duration(slices)
	for s := 0; s < slices; s++ {
		for _, r := range rotate(runners, turn+s) {
			var p0, p1 int64
			r.start(lockCtx)
			w, err := measure(ctx, srv, &r.cnt, sliceWarm, sliceDur,
				func() { p0 = r.pairs.Load() },
				func() { p1 = r.pairs.Load() })
			r.halt()
			if err != nil {
				return rs, errs, err
			}
			addWindow(&r.res.Window, w)
			r.res.Pairs += p1 - p0
		}
	}
	for _, r := range runners {
		r.res.Errors = r.errs.result()
	}
	return rs, errs, nil
}

// TurnWarm is the warm-up of each turn of RunUncontendedInterleaved, whose
// targets warmed up for warm before the first: it covers the start of the
// turn's goroutines.
func TurnWarm(warm time.Duration) time.Duration { return warm / 5 }

// pairRunner runs one target's goroutines of scenario 1, a turn at a time.
type pairRunner struct {
	res   *UncontendedResult
	l     Locker
	cnt   Counter
	keys  []string
	pairs atomic.Int64
	errs  errorLog
	stop  atomic.Bool
	wg    sync.WaitGroup
}

// start starts a goroutine per key, locking and unlocking it until halt.
func (r *pairRunner) start(ctx context.Context) {
	r.stop.Store(false)
	for _, key := range r.keys {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for !r.stop.Load() && ctx.Err() == nil {
				unlock, err := r.l.Lock(ctx, key)
				if err != nil {
					if ctx.Err() == nil {
						r.errs.add(fmt.Errorf("lock: %w", err))
						_ = sleep(ctx, time.Millisecond)
					}
					continue
				}
				if err := unlock(context.Background()); err != nil {
					r.errs.add(fmt.Errorf("unlock: %w", err))
					continue
				}
				r.pairs.Add(1)
			}
		}()
	}
}

// halt stops the goroutines after their current pair and waits for them.
func (r *pairRunner) halt() {
	r.stop.Store(true)
	r.wg.Wait()
}
