package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
)

// ElectionResult is one run of scenario 6, dlock's Election, in three
// parts: campaign costs, idle costs, and the hand-off on Resign. No peer
// offers an election, so it has no side-by-side comparison; what it costs
// is set against the Mutex's figures in the report.
type ElectionResult struct {
	RunInfo
	// Cycles is how many Campaign+Resign cycles one campaigner, alone,
	// completed in CycleWindow.
	Cycles      int64
	CycleWindow Window
	// Campaigners wait (each on a Client of its own) while a leader leads
	// and Observers watch, for IdleWindow.
	Campaigners, Observers int
	IdleWindow             Window
	// Handoffs are the times from a leader's Resign call to the next
	// campaigner's Campaign returning, with HandoffCampaigners taking
	// turns, sorted.
	HandoffCampaigners int
	Handoffs           []time.Duration
	Errors             Errors
}

// CommandsPerCycle is what Redis executed per Campaign+Resign cycle.
func (r ElectionResult) CommandsPerCycle() float64 {
	return float64(r.CycleWindow.Server.Total()) / float64(r.Cycles)
}

// RoundTripsPerCycle is the client's round trips per Campaign+Resign cycle.
func (r ElectionResult) RoundTripsPerCycle() float64 {
	return float64(r.CycleWindow.Client.RoundTrips) / float64(r.Cycles)
}

// IdleCommandsPerSec is what Redis executed per second while nothing
// changed hands.
func (r ElectionResult) IdleCommandsPerSec() float64 {
	return float64(r.IdleWindow.Server.Total()) / r.IdleWindow.Elapsed.Seconds()
}

// IdleRoundTripsPerSec is the Clients' round trips per second meanwhile.
func (r ElectionResult) IdleRoundTripsPerSec() float64 {
	return float64(r.IdleWindow.Client.RoundTrips) / r.IdleWindow.Elapsed.Seconds()
}

// HandoffQuantile is the q-quantile of the hand-offs on Resign.
func (r ElectionResult) HandoffQuantile(q float64) time.Duration { return Quantile(r.Handoffs, q) }

// ElectionSpec sets the shape of scenario 6.
type ElectionSpec struct {
	// Warm and Dur frame the campaign-cost window; IdleDur is the idle
	// window, long enough for the leader's renewal (every TTL/3 = 10 s
	// with the defaults) to fall inside it.
	Warm, Dur, IdleDur     time.Duration
	Campaigners, Observers int
	// HandoffCampaigners take turns leading until Handoffs hand-offs.
	HandoffCampaigners, Handoffs int
}

// electionClients returns n dlock Clients with the defaults, each on a
// go-redis client of its own that counts into cnt (if not nil), as the
// "dlock" target makes them, and a func that closes them all.
func electionClients(srv *Servers, cnt *Counter, n int) ([]*dlock.Client, func(), error) {
	lockers := make([]Locker, 0, n)
	cs := make([]*dlock.Client, 0, n)
	closeLockers := func() { _ = closeAll(lockers) }
	for i := 0; i < n; i++ {
		l, err := newDlock()(Config{Addrs: srv.Addrs, Counter: cnt})
		if err != nil {
			closeLockers()
			return nil, nil, err
		}
		lockers = append(lockers, l)
		cs = append(cs, l.(*dlockLocker).c)
	}
	return cs, closeLockers, nil
}

// RunElection runs scenario 6 on srv with dlock's defaults.
func RunElection(ctx context.Context, srv *Servers, spec ElectionSpec) (ElectionResult, error) {
	res := ElectionResult{Campaigners: spec.Campaigners, Observers: spec.Observers, HandoffCampaigners: spec.HandoffCampaigners}
	var errs errorLog
	defer func() { res.Errors = errs.result() }()
	if err := srv.Flush(ctx); err != nil {
		return res, err
	}
	if err := runElectionCycles(ctx, srv, spec, &res, &errs); err != nil {
		return res, fmt.Errorf("campaign cycles: %w", err)
	}
	if err := runElectionIdle(ctx, srv, spec, &res, &errs); err != nil {
		return res, fmt.Errorf("idle: %w", err)
	}
	if err := runElectionHandoffs(ctx, srv, spec, &res, &errs); err != nil {
		return res, fmt.Errorf("hand-offs: %w", err)
	}
	return res, nil
}

// runElectionCycles has one campaigner campaign and resign in a loop, and
// counts the cycles completed in the window.
func runElectionCycles(ctx context.Context, srv *Servers, spec ElectionSpec, res *ElectionResult, errs *errorLog) error {
	var cnt Counter
	cs, closeClients, err := electionClients(srv, &cnt, 1)
	if err != nil {
		return err
	}
	defer closeClients()
	e := cs[0].Election("bench:e:cycles")
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var cycles atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for runCtx.Err() == nil {
			ld, err := e.Campaign(runCtx, "leader")
			if err == nil {
				err = ld.Resign(context.Background())
			}
			if err != nil {
				if runCtx.Err() == nil {
					errs.add(err)
				}
				continue
			}
			cycles.Add(1)
		}
	}()
	var c0 int64
	res.CycleWindow, err = measure(ctx, srv, &cnt, spec.Warm, spec.Dur,
		func() { c0 = cycles.Load() }, func() { res.Cycles = cycles.Load() - c0 })
	stop()
	<-done
	return err
}

// runElectionIdle has a leader lead while the campaigners wait and the
// observers watch, and counts what that costs per second.
func runElectionIdle(ctx context.Context, srv *Servers, spec ElectionSpec, res *ElectionResult, errs *errorLog) error {
	var cnt Counter
	cs, closeClients, err := electionClients(srv, &cnt, spec.Campaigners+1)
	if err != nil {
		return err
	}
	defer closeClients()
	const name = "bench:e:idle"
	ld, err := cs[0].Election(name).Campaign(ctx, "leader")
	if err != nil {
		return err
	}
	defer func() { _ = ld.Resign(context.Background()) }()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for i := 1; i <= spec.Campaigners; i++ {
		wg.Add(1)
		go func(e *dlock.Election) {
			defer wg.Done()
			if l, err := e.Campaign(runCtx, "follower"); err == nil {
				errs.add(errors.New("a campaigner led while the leader still led"))
				_ = l.Resign(context.Background())
			}
		}(cs[i].Election(name))
	}
	for i := 0; i < spec.Observers; i++ {
		wg.Add(1)
		go func(e *dlock.Election) {
			defer wg.Done()
			for range e.Observe(runCtx) {
			}
		}(cs[1+i%spec.Campaigners].Election(name))
	}
	res.IdleWindow, err = measure(ctx, srv, &cnt, spec.Warm, spec.IdleDur, nil, nil)
	stop()
	wg.Wait()
	if lerr := ld.Err(); lerr != nil {
		errs.add(fmt.Errorf("the leader lost its leadership while idle: %w", lerr))
	}
	return err
}

// runElectionHandoffs has campaigners take turns: each leads, resigns and
// campaigns again; a hand-off is timed from the Resign call to the next
// leader's Campaign returning.
func runElectionHandoffs(ctx context.Context, srv *Servers, spec ElectionSpec, res *ElectionResult, errs *errorLog) error {
	cs, closeClients, err := electionClients(srv, nil, spec.HandoffCampaigners)
	if err != nil {
		return err
	}
	defer closeClients()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	base := time.Now()
	var (
		resignedAt atomic.Int64 // since base, ns; 0 before the first Resign
		mu         sync.Mutex
		wg         sync.WaitGroup
	)
	for _, c := range cs {
		wg.Add(1)
		go func(e *dlock.Election) {
			defer wg.Done()
			for runCtx.Err() == nil {
				ld, err := e.Campaign(runCtx, "turn")
				if err != nil {
					if runCtx.Err() == nil {
						errs.add(err)
					}
					continue
				}
				now := time.Since(base)
				mu.Lock()
				if at := resignedAt.Load(); at > 0 {
					res.Handoffs = append(res.Handoffs, now-time.Duration(at))
				}
				enough := len(res.Handoffs) >= spec.Handoffs
				mu.Unlock()
				if enough {
					stop()
				}
				resignedAt.Store(int64(time.Since(base)))
				if err := ld.Resign(context.Background()); err != nil {
					errs.add(err)
				}
			}
		}(c.Election("bench:e:handoff"))
	}
	wg.Wait()
	SortDurations(res.Handoffs)
	return ctx.Err()
}
