package bench

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Window is the measured part of a run: after the warm-up, between a CONFIG
// RESETSTAT and the INFO commandstats that closes it.
type Window struct {
	Elapsed time.Duration
	Server  CommandStats    // what Redis executed, scripts' inner calls included
	Client  CounterSnapshot // what the library's clients sent
	// ClientCPU is this process's CPU time (user+system) in the window: the
	// library, the harness's goroutines and the Go runtime. ServerCPU is
	// the redis-server processes' (INFO cpu).
	ClientCPU, ServerCPU time.Duration
}

// RunInfo places a result in a report: its repetition, its number of
// redis-servers, and the error that spoilt it, if any.
type RunInfo struct {
	Rep   int
	Nodes int
	// Latency is the round-trip time proxies added to every node (0: none).
	Latency time.Duration `json:",omitempty"`
	Err     string        `json:",omitempty"`
}

// measure sleeps warm, opens the window (resets the server's counters, reads
// c, calls open), sleeps dur and closes it (calls closing, reads c and the
// server's counters). open and closing may be nil.
func measure(ctx context.Context, srv *Servers, c *Counter, warm, dur time.Duration, open, closing func()) (Window, error) {
	if err := sleep(ctx, warm); err != nil {
		return Window{}, err
	}
	if err := srv.ResetStats(ctx); err != nil {
		return Window{}, err
	}
	s0, err := srv.CPU(ctx)
	if err != nil {
		return Window{}, err
	}
	c0 := c.Snapshot()
	u0 := cpuTime()
	t0 := time.Now()
	if open != nil {
		open()
	}
	if err := sleep(ctx, dur); err != nil {
		return Window{}, err
	}
	if closing != nil {
		closing()
	}
	elapsed := time.Since(t0)
	u1 := cpuTime()
	c1 := c.Snapshot()
	s1, err := srv.CPU(ctx)
	if err != nil {
		return Window{}, err
	}
	cs, err := srv.CommandStats(ctx)
	if err != nil {
		return Window{}, err
	}
	return Window{Elapsed: elapsed, Server: cs, Client: c1.Sub(c0), ClientCPU: u1 - u0, ServerCPU: s1 - s0}, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// errorLog keeps the number of unexpected errors and the first one.
type errorLog struct {
	mu    sync.Mutex
	n     int64
	first error
}

func (e *errorLog) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if e.first == nil {
		e.first = err
	}
}

// Errors is how a result reports unexpected errors: their count and the
// first one's text.
type Errors struct {
	Count int64
	First string
}

func (e *errorLog) result() Errors {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := Errors{Count: e.n}
	if e.first != nil {
		r.First = e.first.Error()
	}
	return r
}

// newLockers makes n Lockers of t on srv, each counting into cnt. On an
// error it returns those made so far, for closeAll.
func newLockers(t Target, srv *Servers, n int, cnt *Counter) ([]Locker, error) {
	lockers := make([]Locker, 0, n)
	for i := 0; i < n; i++ {
		l, err := t.New(Config{Addrs: srv.Addrs, Counter: cnt})
		if err != nil {
			return lockers, err
		}
		lockers = append(lockers, l)
	}
	return lockers, nil
}

// closeAll closes every Locker.
func closeAll(ls []Locker) error {
	var errs []error
	for _, l := range ls {
		if l != nil {
			errs = append(errs, l.Close())
		}
	}
	return errors.Join(errs...)
}
