package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// WaitingResult is one run of scenario 3: many goroutines across several
// clients blocked on one lock that another client holds throughout.
type WaitingResult struct {
	RunInfo
	Target  string
	Clients int
	Waiters int
	Window  Window
	// Started is how long it took from the first Lock call until every
	// waiter had sent its first attempt (as far as the client shows it).
	Started time.Duration
	// Grants counts waiters that got the lock while it was held: it must be
	// 0 (it would mean the holder lost it).
	Grants int64
	Errors Errors
}

// CommandsPerSec is what Redis executed per second while everyone waited.
func (r WaitingResult) CommandsPerSec() float64 {
	return float64(r.Window.Server.Total()) / r.Window.Elapsed.Seconds()
}

// RoundTripsPerSec is the waiters' clients' round trips per second.
func (r WaitingResult) RoundTripsPerSec() float64 {
	return float64(r.Window.Client.RoundTrips) / r.Window.Elapsed.Seconds()
}

// WaitingSpec sets the shape of scenario 3.
type WaitingSpec struct {
	Clients, Waiters int
	Warm, Dur        time.Duration
}

// RunWaiting runs scenario 3 for t on srv. A separate client takes the lock
// first and holds it until the waiters have been cancelled; only the
// waiters' clients are counted on the client side, and nothing else runs on
// the server, so its counts are the waiters' load (plus the holder's
// renewals, if its library renews).
func RunWaiting(ctx context.Context, t Target, srv *Servers, spec WaitingSpec) (WaitingResult, error) {
	res := WaitingResult{Target: t.Name, Clients: spec.Clients, Waiters: spec.Waiters}
	if err := srv.Flush(ctx); err != nil {
		return res, err
	}
	const key = "bench:w"
	holder, err := t.New(Config{Addrs: srv.Addrs})
	if err != nil {
		return res, err
	}
	defer holder.Close()
	holdCtx, release := context.WithCancel(context.Background())
	defer release()
	unlockHolder, err := holder.TryLock(holdCtx, key)
	if err != nil {
		return res, fmt.Errorf("holder: %w", err)
	}

	var cnt Counter
	lockers, err := newLockers(t, srv, spec.Clients, &cnt)
	defer func() { _ = closeAll(lockers) }()
	if err != nil {
		return res, err
	}

	waitCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		grants atomic.Int64
		errs   errorLog
		wg     sync.WaitGroup
	)
	begin := time.Now()
	for i := 0; i < spec.Waiters; i++ {
		wg.Add(1)
		go func(l Locker) {
			defer wg.Done()
			unlock, err := l.Lock(waitCtx, key)
			switch {
			case err == nil:
				grants.Add(1)
				_ = unlock(context.Background())
			case waitCtx.Err() == nil:
				errs.add(err)
			}
		}(lockers[i%spec.Clients])
	}
	// Every waiter has made its first attempt once the clients have sent
	// at least one command per waiter.
	for cnt.Snapshot().Commands < int64(spec.Waiters) && time.Since(begin) < spec.Warm {
		time.Sleep(time.Millisecond)
	}
	res.Started = time.Since(begin)

	res.Window, err = measure(ctx, srv, &cnt, spec.Warm, spec.Dur, nil, nil)
	stop()
	wg.Wait()
	res.Grants = grants.Load()
	res.Errors = errs.result()
	if uerr := unlockHolder(context.Background()); uerr != nil {
		// The holder lost the lock while it should have held it: the
		// figures are not about waiting alone.
		res.Errors.Count++
		res.Errors.First = "holder's unlock: " + uerr.Error()
	}
	return res, err
}
