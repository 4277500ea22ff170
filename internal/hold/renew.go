package hold

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
)

// renew sends one batch of renewals in a single pipelined round trip and
// applies the outcomes. Its context ends at the earliest deadline in the
// batch: past that, the answer no longer matters.
func (w *Watchdog) renew(batch []*Lease) {
	defer w.batches.Done()
	start := time.Now()
	b := w.prepare(batch, start)
	ctx, cancel := context.WithDeadline(w.ctx, b.deadline)
	b.send(ctx, w.drv, w.ctx.Done())
	cancel()
	w.apply(b, start)
	w.poke()
	w.record(b, start)
}

// renewBatch is one round of renewals.
type renewBatch struct {
	items    []renewItem
	calls    []*driver.Call // every item's calls, for one pipeline
	solo     []int          // items whose holders renew by themselves
	deadline time.Time      // the earliest validity deadline in the batch
}

// renewItem is one lease's renewal: the expiry asked for, the calls that
// ask for it (none for holders that renew by themselves), the outcome, and
// what the Host hears of it.
type renewItem struct {
	l        *Lease
	calls    []*driver.Call
	record   []*driver.Call // when the hold began, sent after (record.go)
	px       time.Duration
	shorten  bool
	result   error
	report   bool          // Host.Renewed
	retry    bool          // Host.RenewFailed
	validFor time.Duration // left at a failure
}

// prepare builds the batch's calls under w.mu.
func (w *Watchdog) prepare(batch []*Lease, start time.Time) *renewBatch {
	b := &renewBatch{items: make([]renewItem, len(batch)), deadline: start.Add(time.Hour)}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, l := range batch {
		it := &b.items[i]
		it.l = l
		it.px = l.cappedLocked(l.ttl, start)
		it.shorten = l.shortensLocked(start, it.px)
		if br, ok := l.host.Holder().(BatchRenewer); ok {
			it.calls = br.RenewCalls(l.owner, it.px, it.shorten)
			askAck(l.replicas, l.replicaTimeout, it.calls...)
			b.calls = append(b.calls, it.calls...)
		} else {
			b.solo = append(b.solo, i)
		}
		it.record = l.recordCallsLocked(start)
		if l.validUntil.Before(b.deadline) {
			b.deadline = l.validUntil
		}
	}
	return b
}

// send runs the batch's calls in one pipeline, and the solo renewals
// beside it, then reads every outcome.
func (b *renewBatch) send(ctx context.Context, drv driver.Driver, stop <-chan struct{}) {
	var wg sync.WaitGroup
	for _, i := range b.solo {
		wg.Add(1)
		go func(it *renewItem) {
			defer wg.Done()
			it.result = it.l.host.Holder().Renew(ctx, it.l.owner, it.px, it.shorten)
		}(&b.items[i])
	}
	if len(b.calls) > 0 {
		drv.Run(ctx, b.calls...)
	}
	wg.Wait()
	b.settle(stop)
	for i := range b.items {
		it := &b.items[i]
		if br, ok := it.l.host.Holder().(BatchRenewer); ok {
			it.result = br.RenewResult(it.calls)
			if it.result == nil {
				// Re-armed on the master but not on enough replicas: not
				// a renewal the lease may count on (retried by apply).
				it.result = ackErr(it.calls...)
			}
		}
	}
}

// settle waits until the client library is done with every renewal the
// batch's deadline left on its way (driver.InFlightError), or until stop
// closes. Only then is the renewal over: one still on its way could reach
// Redis after the release that Unlock sends once it is over.
func (b *renewBatch) settle(stop <-chan struct{}) {
	for _, c := range b.calls {
		awaitInFlight(c.Err, stop)
	}
	for _, i := range b.solo {
		awaitInFlight(b.items[i].result, stop)
	}
}

// awaitInFlight waits, if err says a call is still on its way, until the
// client library is done with it or stop closes.
func awaitInFlight(err error, stop <-chan struct{}) {
	if done := errs.InFlightDone(err); done != nil {
		select {
		case <-done:
		case <-stop:
		}
	}
}

// apply records each outcome: a renewed lease's new validity, a lost
// lease's loss, a failure's retry. Host calls and loss callbacks run after
// w.mu is released.
func (w *Watchdog) apply(b *renewBatch, start time.Time) {
	now := time.Now()
	var (
		lost  []*Lease
		funcs [][]func(error)
	)
	w.mu.Lock()
	for i := range b.items {
		it := &b.items[i]
		l, err := it.l, it.result
		it.report = l.state == held && l.err == nil
		close(l.renewing)
		l.renewing = nil
		if !it.report {
			continue // unlocked or lost meanwhile
		}
		switch {
		case err == nil:
			l.lastErr = nil
			l.applyValidityLocked(start, it.px)
		case errors.Is(err, errs.ErrNotHeld):
			funcs = append(funcs, l.loseLocked("a renewal found the key gone or held by another owner"))
			lost = append(lost, l)
			continue
		default:
			l.lastErr = err
			l.nextRenew = now.Add(renewRetryDelay(l.ttl))
			it.retry, it.validFor = true, l.validUntil.Sub(now)
		}
		w.rescheduleLocked(l)
	}
	w.mu.Unlock()
	for i := range b.items {
		it := &b.items[i]
		if it.report {
			it.l.host.Renewed(it.result)
		}
		if it.retry {
			it.l.host.RenewFailed(it.result, it.validFor)
		}
	}
	for i, l := range lost {
		l.runLoss(funcs[i])
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
