package dlock

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/wait"
)

// queuedLock is a lock whose waiters queue in Redis and are handed the lock
// on release. Every primitive that waits implements it, and they all share
// one waiting loop, Client.acquire.
type queuedLock interface {
	holder
	// channel is where grants for this lock are published.
	channel() string
	// attempt tries to take the lock for owner; with queue it also joins
	// the lock's queue (or refreshes owner's place in it) when not granted.
	attempt(ctx context.Context, owner string, queue bool) (wait.Result, error)
}

// placeHolder is a queued lock whose waiters hold their places in its queue
// keys; acquireAs groups them by lock.
type placeHolder interface {
	place(owner string) wait.Place
}

// acquire is TryLock (wait false) and Lock (wait true) for every queued
// lock, for a fresh owner.
func (c *Client) acquire(ctx context.Context, q queuedLock, cfg *config, block bool) (*Lease, error) {
	if cfg.observer != nil {
		try, waiting := verbsOf(q)
		op := try
		if block {
			op = waiting
		}
		return observeAcquire(ctx, cfg, q.kind(), q.lockName(), op, func(ctx context.Context) (*Lease, error) {
			return c.acquireFresh(ctx, q, cfg, block)
		})
	}
	return c.acquireFresh(ctx, q, cfg, block)
}

func (c *Client) acquireFresh(ctx context.Context, q queuedLock, cfg *config, block bool) (*Lease, error) {
	owner, err := ownerid.New(cfg.ownerInfo)
	if err != nil {
		return nil, err
	}
	return c.acquireAs(ctx, q, cfg, block, owner)
}

// acquireAs is acquire for a given owner: a multi-lock takes every name for
// one owner, a reentrant lock for the caller's identity.
func (c *Client) acquireAs(ctx context.Context, q queuedLock, cfg *config, block bool, owner string) (*Lease, error) {
	name := q.lockName()
	tryVerb, waitVerb := verbsOf(q)
	verb := tryVerb
	if block {
		verb = waitVerb
	}
	if err := c.checkOpen(verb, name); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		if !block {
			return nil, errs.TryEnded(ctx, verb, name) // as when ctx ends during the attempt
		}
		return nil, errs.WaitEnded(ctx, name, time.Now(), 0, nil)
	}
	if block {
		// The first attempt queues straight away and needs no waiter yet:
		// most locks are free, and a grant published before the waiter
		// registers is kept for it by the notifier.
		channel := q.channel()
		confirmed := !cfg.wait.spin && c.notify.Expect(channel, owner)
		start := time.Now()
		countAttempt(ctx, cfg)
		r, err := q.attempt(ctx, owner, true)
		if confirmed && (err != nil || r.Granted) {
			c.notify.Forget(channel, owner)
		}
		if err == nil && r.Granted {
			l, err := c.leaseFor(ctx, q, cfg, owner, r, start)
			if !errors.Is(err, errGrantExpired) {
				return l, err
			}
		}
		st := &wait.Owner{}
		spec := wait.Spec{
			Name:    name,
			Verb:    waitVerb,
			Channel: channel,
			Owner:   owner,
			State:   st,
			Attempt: func(ctx context.Context) (wait.Result, error) { return q.attempt(ctx, owner, true) },
			Abandon: func(cause error) { c.abandon(ctx, q, cfg, owner, cause, st) },
		}
		spec.First = &wait.First{Result: r, Err: err, Start: start, Confirmed: confirmed}
		if p, ok := q.(placeHolder); ok {
			place := p.place(owner)
			spec.Place = &place
		}
		for {
			r, from, err := c.waits.Wait(ctx, cfg.waitSettings(), spec)
			spec.First = nil
			if err != nil {
				return nil, err
			}
			l, err := c.leaseFor(ctx, q, cfg, owner, r, from)
			if errors.Is(err, errGrantExpired) {
				if ctx.Err() != nil {
					return nil, errs.WaitEnded(ctx, name, start, 0, nil)
				}
				st.GrantExpired(r.Fence) // nor may a copy of it, heard later
				continue                 // this process stalled past its claim window: wait again
			}
			return l, err
		}
	}
	start := time.Now()
	countAttempt(ctx, cfg)
	r, err := q.attempt(ctx, owner, false)
	if err != nil {
		c.abandon(ctx, q, cfg, owner, err, nil)
		return nil, errs.Redis(tryVerb, name, err)
	}
	if !r.Granted {
		return nil, &errs.NotObtainedError{Name: name, HolderTTL: r.PTTL, QueuedAhead: r.QueuedAhead}
	}
	return c.leaseFor(ctx, q, cfg, owner, r, start)
}

// leaseMaker is a queuedLock that builds its own leases from grants (the
// reentrant lock shares one renewal among nested holds).
type leaseMaker interface {
	makeLease(ctx context.Context, cfg *config, owner string, r wait.Result, from time.Time) (*Lease, error)
}

// leaseFor turns a grant into a lease.
func (c *Client) leaseFor(ctx context.Context, q queuedLock, cfg *config, owner string, r wait.Result, from time.Time) (*Lease, error) {
	var l *Lease
	var err error
	if m, ok := q.(leaseMaker); ok {
		l, err = m.makeLease(ctx, cfg, owner, r, from)
	} else {
		l, err = newLease(ctx, c.wd, q, cfg, owner, r.Fence, from, r.PTTL)
	}
	if err == nil && r.GrantedAtUs > 0 {
		l.handoff = time.Since(time.UnixMicro(r.GrantedAtUs))
	}
	return l, err
}

// verbed is a queuedLock whose acquire has its own verbs in errors
// ("TryAcquire"/"Acquire", "TryRLock"/"RLock"); others say TryLock/Lock.
type verbed interface {
	verbs() (try, wait string)
}

func verbsOf(q queuedLock) (try, wait string) {
	if v, ok := q.(verbed); ok {
		return v.verbs()
	}
	return "TryLock", "Lock"
}

// abandon leaves nothing behind after an acquire that did not return a
// lease: it removes owner from the queue and, if the lock was granted to it
// meanwhile (or the failed attempt took it after all), releases it to the
// next waiter. It runs in the background, detached from ctx (which may be
// cancelled) and bounded by the release timeout, so the caller returns at
// its deadline even when Redis is slow or down; Close waits for it. A
// foreign key's error reply (WRONGTYPE or DLOCK_CONFLICT) needs no
// clean-up: the acquire scripts raise them before they queue or grant
// anything (internal/scripts/lock_lib.lua), and a release would only meet
// the same foreign key. Nor does a grant too few replicas acknowledged
// (grantAcked released it before returning). Other error replies do need
// it: a waiter's later poll that Redis refuses (OOM at maxmemory, an ACL's
// NOPERM) finds the place its earlier polls took still in the queue, where
// a release would hand the lock to it for a claim window.
//
// When an attempt for owner was still on its way as its caller stopped
// waiting for it (a driver.InFlightError, as the go-redis driver reports at
// a deadline: cause, or one kept in st, the owner's wait state, which may
// be nil), the clean-up waits until the client library is done with it:
// sent at once, it could reach Redis first, find nothing, and leave the
// late attempt to take the lock (or a place in its queue) for an owner
// nobody knows. Close does not wait for that: the clean-up then goes at
// once.
func (c *Client) abandon(ctx context.Context, q queuedLock, cfg *config, owner string, cause error, st *wait.Owner) {
	if cause != nil && (errs.IsConflict(cause) || errors.Is(cause, ErrReplicaAck)) {
		return
	}
	var pending []<-chan struct{}
	if st != nil {
		pending = append(pending, st.Pending...)
	}
	if done := errs.InFlightDone(cause); done != nil {
		pending = append(pending, done)
	}
	c.cleanups.Go(func() {
		for _, p := range pending {
			select {
			case <-p:
			case <-c.closed:
			}
		}
		// The release timeout counts from here: the wait above is the
		// attempt's, bounded by the client library's timeouts.
		rctx, cancel := detach(ctx, cfg.releaseTimeout)
		defer cancel()
		if err := q.release(rctx, owner); err != nil && !errors.Is(err, ErrNotHeld) {
			cfg.logger.Warn("dlock: clean-up after an abandoned acquire failed; the lock expires by its TTL",
				slog.String("lock", q.lockName()), slog.Any("error", err))
		}
	})
}
