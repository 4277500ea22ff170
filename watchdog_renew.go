package dlock

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// renew sends one batch of renewals in a single pipelined round trip and
// applies the outcomes. Its context ends at the earliest deadline in the
// batch: past that, the answer no longer matters.
func (w *watchdog) renew(batch []*Lease) {
	defer w.batches.Done()
	start := time.Now()
	b := w.prepare(batch, start)
	ctx, cancel := context.WithDeadline(w.ctx, b.deadline)
	b.send(ctx, w.drv)
	cancel()
	w.apply(b, start)
	w.poke()
}

// renewBatch is one round of renewals: per lease, the expiry asked for and
// the calls that ask for it (none for holders that renew by themselves).
type renewBatch struct {
	leases   []*Lease
	perLease [][]*driver.Call
	calls    []*driver.Call
	solo     []int // leases whose holders renew by themselves
	pxs      []time.Duration
	shorten  []bool
	results  []error
	deadline time.Time // the earliest validity deadline in the batch
}

// prepare builds the batch's calls under w.mu.
func (w *watchdog) prepare(batch []*Lease, start time.Time) *renewBatch {
	b := &renewBatch{leases: batch, perLease: make([][]*driver.Call, len(batch)), pxs: make([]time.Duration, len(batch)),
		shorten: make([]bool, len(batch)), results: make([]error, len(batch)), deadline: start.Add(time.Hour)}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, l := range batch {
		b.pxs[i] = l.cappedLocked(l.ttl, start)
		b.shorten[i] = l.shortensLocked(start, b.pxs[i])
		if br, ok := l.h.(batchRenewer); ok {
			b.perLease[i] = br.RenewCalls(l.owner, b.pxs[i], b.shorten[i])
			l.cfg.askAck(b.perLease[i]...) // WithReplicaAck: see replicaack.go
			b.calls = append(b.calls, b.perLease[i]...)
		} else {
			b.solo = append(b.solo, i)
		}
		if l.validUntil.Before(b.deadline) {
			b.deadline = l.validUntil
		}
	}
	return b
}

// send runs the batch's calls in one pipeline, and the solo renewals
// beside it, then reads every outcome.
func (b *renewBatch) send(ctx context.Context, drv driver.Driver) {
	var wg sync.WaitGroup
	for _, i := range b.solo {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			l := b.leases[i]
			b.results[i] = l.h.Renew(ctx, l.owner, b.pxs[i], b.shorten[i])
		}(i)
	}
	if len(b.calls) > 0 {
		drv.Run(ctx, b.calls...)
	}
	wg.Wait()
	for i, l := range b.leases {
		if br, ok := l.h.(batchRenewer); ok {
			b.results[i] = br.RenewResult(b.perLease[i])
			if b.results[i] == nil {
				// Re-armed on the master but not on enough replicas: not
				// a renewal the lease may count on (retried by apply).
				b.results[i] = ackErr(b.perLease[i]...)
			}
		}
	}
}

// apply records each outcome: a renewed lease's new validity, a lost
// lease's loss, a failure's retry. Observers, logs and loss callbacks run
// after w.mu is released.
func (w *watchdog) apply(b *renewBatch, start time.Time) {
	now := time.Now()
	var (
		lost     []*Lease
		funcs    [][]func(error)
		observed []func()
	)
	w.mu.Lock()
	for i, l := range b.leases {
		if o := l.cfg.observer; o != nil && l.state == leaseHeld && l.err == nil {
			info, err := l.info(), b.results[i]
			observed = append(observed, func() { o.Renewed(info, err) })
		}
		close(l.renewing)
		l.renewing = nil
		if l.state != leaseHeld || l.err != nil {
			continue // unlocked or lost meanwhile
		}
		err := b.results[i]
		switch {
		case err == nil:
			l.lastErr = nil
			l.applyValidityLocked(start, b.pxs[i])
		case errors.Is(err, ErrNotHeld):
			funcs = append(funcs, w.loseLocked(l, "a renewal found the key gone or held by another owner"))
			lost = append(lost, l)
			continue
		default:
			l.lastErr = err
			l.nextRenew = now.Add(renewRetryDelay(l.ttl))
			logger, name, kind, token, validFor := l.cfg.logger, l.Name(), l.kind, l.token, l.validUntil.Sub(now)
			observed = append(observed, func() {
				logger.Warn("dlock: renewal failed; retrying", slog.String("lock", name), slog.String("kind", string(kind)),
					slog.Int64("token", token), slog.Duration("valid_for", validFor), slog.Any("error", err))
			})
		}
		w.rescheduleLocked(l)
	}
	w.mu.Unlock()
	for _, f := range observed {
		f()
	}
	for i, l := range lost {
		runLossFuncs(funcs[i], l)
	}
}

// renewRetryDelay spaces renewal retries after a failure: often enough to
// get several tries in before the deadline, rarely enough not to hammer a
// struggling server.
func renewRetryDelay(ttl time.Duration) time.Duration {
	d := ttl / 20
	if d < 5*time.Millisecond {
		d = 5 * time.Millisecond
	}
	if d > time.Second {
		d = time.Second
	}
	return d
}
