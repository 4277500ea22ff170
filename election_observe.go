package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/wait"
)

// Observe returns a channel that receives the election's leader, first as
// it is now, then every time it changes (a new leader, a new value, or
// nobody: the zero LeaderInfo), in order, until ctx ends or the Client
// closes; then the channel is closed. Changes are announced by pub/sub,
// and Observe also reads the leader every third of the election's TTL, so
// a lost message costs latency, never a missed leader. A reader slower
// than the changes gets the latest leader, not every one in between.
func (e *Election) Observe(ctx context.Context) <-chan LeaderInfo {
	out := make(chan LeaderInfo)
	if err := e.check("Observe", ""); err != nil {
		close(out)
		return out
	}
	go e.observe(ctx, out)
	return out
}

func (e *Election) observe(ctx context.Context, out chan<- LeaderInfo) {
	defer close(out)
	c := e.m.c
	signal := make(chan struct{}, 1)
	w := c.notify.RegisterSignal(e.record, "election", signal)
	defer c.notify.Unregister(e.record, w)
	// Subscribed before the first read, so that a change after it is
	// heard; a subscription that fails leaves the polls.
	sctx, cancel := context.WithTimeout(ctx, e.m.cfg.releaseTimeout)
	_ = c.notify.Subscribe(sctx, e.record)
	cancel()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	failures := wait.ErrorDelay()
	var last LeaderInfo
	sent := false
	for {
		delay := e.m.cfg.ttl / 3
		info, err := e.Leader(ctx)
		switch {
		case err == nil || errors.Is(err, ErrNoLeader):
			if !sent || info != last {
				select {
				case out <- info:
				case <-ctx.Done():
					return
				case <-c.closed:
					return
				}
				last, sent = info, true
			}
			failures = wait.ErrorDelay()
		default:
			delay = failures.Next() // Redis failed: read again soon
		}
		wait.StopTimer(timer)
		timer.Reset(delay)
		select {
		case <-signal:
		case <-timer.C:
		case <-ctx.Done():
			return
		case <-c.closed:
			return
		}
	}
}

// Run campaigns with value and runs fn while leading, with a context that
// is cancelled (cause: an error matching ErrLockLost) when the leadership
// is lost; after a loss it campaigns again, until ctx ends. When fn
// returns while still leading, Run resigns and returns fn's error. It
// returns ctx's error when ctx ends, after resigning if it leads, and any
// other error a campaign ends with.
func (e *Election) Run(ctx context.Context, value string, fn func(ctx context.Context) error) error {
	if fn == nil {
		return errs.InvalidArgf("Election %q: Run: nil function", e.m.name)
	}
	for {
		ld, err := e.Campaign(ctx, value)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		lost, err := ld.run(ctx, fn)
		if !lost || ctx.Err() != nil {
			rctx, cancel := detach(ctx, e.m.cfg.releaseTimeout)
			rerr := ld.Resign(rctx)
			cancel()
			if err == nil && ctx.Err() == nil && rerr != nil && !errors.Is(rerr, ErrNotHeld) {
				err = rerr
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		// Lost: fn saw its context cancelled; campaign again.
	}
}

// run runs fn under a context that ends when the leadership is lost, and
// reports whether it was.
func (ld *Leadership) run(ctx context.Context, fn func(ctx context.Context) error) (lost bool, err error) {
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-ld.Done():
			cancel(ld.Err())
		case <-stop:
		}
	}()
	err = fn(fctx)
	close(stop)
	<-watched
	lerr := ld.Err()
	return lerr != nil && errors.Is(lerr, ErrLockLost), err
}
