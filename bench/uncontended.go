package bench

import (
	"context"
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

// RunUncontended runs scenario 1 for t on srv with g goroutines: warm-up,
// then pairs are counted for dur. Each goroutine uses its own key, Lock
// (the waiting call, which finds the key free) and then Unlock.
func RunUncontended(ctx context.Context, t Target, srv *Servers, g int, warm, dur time.Duration) (UncontendedResult, error) {
	res := UncontendedResult{Target: t.Name, Goroutines: g}
	if err := srv.Flush(ctx); err != nil {
		return res, err
	}
	var cnt Counter
	l, err := t.New(Config{Addrs: srv.Addrs, Counter: &cnt})
	if err != nil {
		return res, err
	}
	defer l.Close()

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		pairs atomic.Int64
		errs  errorLog
		wg    sync.WaitGroup
	)
	for i := 0; i < g; i++ {
		key := fmt.Sprintf("bench:u:%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				unlock, err := l.Lock(runCtx, key)
				if err != nil {
					if runCtx.Err() == nil {
						errs.add(fmt.Errorf("lock: %w", err))
						_ = sleep(runCtx, time.Millisecond)
					}
					continue
				}
				if err := unlock(context.Background()); err != nil {
					errs.add(fmt.Errorf("unlock: %w", err))
					continue
				}
				pairs.Add(1)
			}
		}()
	}
	var p0, p1 int64
	res.Window, err = measure(ctx, srv, &cnt, warm, dur,
		func() { p0 = pairs.Load() },
		func() { p1 = pairs.Load() })
	stop()
	wg.Wait()
	res.Pairs = p1 - p0
	res.Errors = errs.result()
	return res, err
}
