package hold

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
)

// Extend sets the lock's remaining time to ttl and makes ttl the lease's TTL
// for later renewals (dlock.Lease.Extend, whose errors it returns); a nested
// hold extends its parent. ttl must be valid already.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	name := l.host.Name()
	if l.parent != nil {
		if err := l.Usable(); err != nil {
			return errs.Errorf("dlock: Extend %q: %w", name, err)
		}
		return l.parent.Extend(ctx, ttl)
	}
	wd := l.wd
	wd.mu.Lock()
	// One request that sets the key's expiry at a time, per lease: a
	// renewal of the watchdog's or another Extend in flight goes first.
	// Requests on the wire together may reach Redis in either order, and
	// the later one's expiry is the key's, whichever this process heard
	// back from last: a renewal for the old TTL landing after an Extend for
	// a longer one would shorten the key under a lease that counts on the
	// longer validity (docs/holding.md, "One expiry request at a time").
	for l.renewing != nil && l.usableLocked() == nil {
		inFlight := l.renewing
		wd.mu.Unlock()
		select {
		case <-inFlight:
		case <-ctx.Done():
			return errs.Errorf("dlock: Extend %q: waiting for the renewal in flight: %w", name, ctx.Err())
		}
		wd.mu.Lock()
	}
	if err := l.usableLocked(); err != nil {
		wd.mu.Unlock()
		return errs.Errorf("dlock: Extend %q: %w", name, err)
	}
	start := time.Now()
	px := l.cappedLocked(ttl, start)
	if px < MinTTL {
		// The key expires within MinTTL, and nothing may renew it: the
		// lease ends now rather than at a deadline moments away.
		lost := l.loseLocked("the maximum hold time (WithMaxHold) was reached")
		wd.mu.Unlock()
		l.runLoss(lost)
		return errs.Errorf("dlock: Extend %q: %w: the maximum hold time (WithMaxHold) is reached", name, errs.ErrNotHeld)
	}
	shorten := l.shortensLocked(start, px)
	inFlight := make(chan struct{})
	l.renewing = inFlight
	wd.rescheduleLocked(l) // no renewal while this one is in flight
	wd.mu.Unlock()

	err := l.renewHold(ctx, px, shorten)
	l.extended(inFlight, err, ttl, start, px)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errs.ErrNotHeld):
		return errs.Errorf("dlock: Extend %q: %w: it expired or was taken over", name, errs.ErrNotHeld)
	}
	return errs.Redis("Extend", name, err)
}

// extended records how an Extend for ttl (px, sent at start) went, and lets
// whatever waits for it (inFlight) go on: at once, or, when ctx's end left
// the renewal on its way, once the client library is done with it (see
// renewBatch.settle); Extend itself returns at once.
func (l *Lease) extended(inFlight chan struct{}, err error, ttl time.Duration, start time.Time, px time.Duration) {
	wd := l.wd
	wd.mu.Lock()
	if errs.InFlightDone(err) != nil && !wd.closed {
		wd.batches.Add(1)
		go l.settleExtend(inFlight, err)
	} else {
		close(inFlight)
		l.renewing = nil
	}
	var lost []func(error)
	switch {
	case err == nil:
		l.ttl = ttl
		l.applyValidityLocked(start, px)
		wd.rescheduleLocked(l)
	case errors.Is(err, errs.ErrNotHeld):
		lost = l.loseLocked("Extend found the key gone or held by another owner")
	default:
		l.distrustLocked(start, px)
		wd.rescheduleLocked(l)
	}
	wd.mu.Unlock()
	l.runLoss(lost)
	if !errors.Is(err, errs.ErrNotHeld) {
		wd.poke()
	}
}

// settleExtend ends an Extend's renewal once the client library is done
// with it (or the Watchdog closes), and lets the Watchdog renew again.
func (l *Lease) settleExtend(inFlight chan struct{}, err error) {
	wd := l.wd
	defer wd.batches.Done()
	awaitInFlight(err, wd.ctx.Done())
	wd.mu.Lock()
	close(inFlight)
	if l.renewing == inFlight {
		l.renewing = nil
		wd.rescheduleLocked(l)
	}
	wd.mu.Unlock()
	wd.poke()
}

// TTL returns the lock's remaining time as the server sees it
// (dlock.Lease.TTL, whose errors it returns); a nested hold asks its
// parent.
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	name := l.host.Name()
	if err := l.Usable(); err != nil {
		return 0, errs.Errorf("dlock: TTL %q: %w", name, err)
	}
	if l.parent != nil {
		return l.parent.TTL(ctx)
	}
	d, err := l.host.Holder().Remaining(ctx, l.owner)
	switch {
	case err == nil:
		return d, nil
	case errors.Is(err, errs.ErrNotHeld):
		if !l.LoseIfHeld("TTL found the key gone or held by another owner") {
			// An Unlock released it meanwhile: not a loss.
			return 0, errs.Errorf("dlock: TTL %q: %w", name, ErrReleased)
		}
		return 0, errs.Errorf("dlock: TTL %q: %w: it expired or was taken over", name, errs.ErrNotHeld)
	}
	return 0, errs.Redis("TTL", name, err)
}

// renewHold re-arms the lease's hold for px (shortening it only when
// shorten is set): its Holder's renewal, followed by WAIT when the lease's
// settings ask for replica acknowledgement, in which case a renewal that
// too few replicas acknowledged is an error matching errs.ErrReplicaAck (the
// key was re-armed on the master, but the lease must not count on it). The
// Watchdog's batches do the same (renew.go).
func (l *Lease) renewHold(ctx context.Context, px time.Duration, shorten bool) error {
	h := l.host.Holder()
	b, ok := h.(BatchRenewer)
	if !ok || l.replicas <= 0 {
		return h.Renew(ctx, l.owner, px, shorten)
	}
	calls := b.RenewCalls(l.owner, px, shorten)
	askAck(l.replicas, l.replicaTimeout, calls...)
	l.wd.drv.Run(ctx, calls...)
	for _, c := range calls {
		if errs.InFlightDone(c.Err) != nil {
			return c.Err // still on its way: see extended
		}
	}
	if err := b.RenewResult(calls); err != nil {
		return err
	}
	return ackErr(calls...)
}
