package dlock

import (
	"context"
	"errors"
	"log/slog"
	"math/rand"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/ownerid"
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
	attempt(ctx context.Context, owner string, queue bool) (attemptResult, error)
}

// attemptResult is the outcome of one acquire attempt.
type attemptResult struct {
	granted bool
	fence   int64
	// pttl is the remaining time of owner's key when granted, and of the
	// holder's key otherwise.
	pttl time.Duration
	// grantedAtUs is, for a grant handed over by a release, when it was
	// made in µs (handoff.atUs; a local hand-off's transfer reply); 0
	// otherwise.
	grantedAtUs int64
	// queuedAhead says, when not granted, why although enough was free:
	// others waiting first come first (a Semaphore's arrival order, an
	// RWMutex's waiting writer). "" otherwise.
	queuedAhead string
	// lastFence is, when not granted, the last fencing token the lock had
	// issued when the server ran the attempt: a grant heard afterwards with
	// a token no higher was made before the attempt (see waitFor).
	lastFence int64
}

// lastFenceAt reads the last token issued from item i of a not-granted
// reply; 0 (every grant is newer) when the reply has none.
func lastFenceAt(reply any, i int) int64 {
	if items, _ := reply.([]any); len(items) > i {
		fence, _ := items[i].(int64)
		return fence
	}
	return 0
}

// acquire is TryLock (wait false) and Lock (wait true) for every queued
// lock, for a fresh owner.
func (c *Client) acquire(ctx context.Context, q queuedLock, cfg *config, wait bool) (*Lease, error) {
	if cfg.observer != nil {
		try, waiting := verbsOf(q)
		op := try
		if wait {
			op = waiting
		}
		return observeAcquire(ctx, cfg, kindOf(q), q.lockName(), op, func(ctx context.Context) (*Lease, error) {
			return c.acquireFresh(ctx, q, cfg, wait)
		})
	}
	return c.acquireFresh(ctx, q, cfg, wait)
}

func (c *Client) acquireFresh(ctx context.Context, q queuedLock, cfg *config, wait bool) (*Lease, error) {
	owner, err := ownerid.New(cfg.ownerInfo)
	if err != nil {
		return nil, err
	}
	return c.acquireAs(ctx, q, cfg, wait, owner)
}

// acquireAs is acquire for a given owner: a multi-lock takes every name for
// one owner, a reentrant lock for the caller's identity.
func (c *Client) acquireAs(ctx context.Context, q queuedLock, cfg *config, wait bool, owner string) (*Lease, error) {
	name := q.lockName()
	tryVerb, waitVerb := verbsOf(q)
	verb := tryVerb
	if wait {
		verb = waitVerb
	}
	if err := c.checkOpen(verb, name); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		if !wait {
			return nil, errs.TryEnded(ctx, verb, name) // as when ctx ends during the attempt
		}
		return nil, errs.WaitEnded(ctx, name, time.Now(), 0, nil)
	}
	if wait {
		// The first attempt queues straight away and needs no waiter yet:
		// most locks are free, and a grant published before the waiter
		// registers is kept for it by the notifier.
		channel := q.channel()
		confirmed := !cfg.wait.spin && c.notify.Expect(channel, owner)
		start := time.Now()
		countAttempt(ctx, cfg)
		r, err := q.attempt(ctx, owner, true)
		if confirmed && (err != nil || r.granted) {
			c.notify.Forget(channel, owner)
		}
		if err == nil && r.granted {
			l, err := c.leaseFor(ctx, q, cfg, owner, r, start)
			if !errors.Is(err, errGrantExpired) {
				return l, err
			}
		}
		st := &ownerWait{}
		spec := waitSpec{
			name:    name,
			verb:    waitVerb,
			channel: channel,
			owner:   owner,
			state:   st,
			attempt: func(ctx context.Context) (attemptResult, error) { return q.attempt(ctx, owner, true) },
			abandon: func(cause error) { c.abandon(ctx, q, cfg, owner, cause, st) },
		}
		spec.first = &firstAttempt{result: r, err: err, start: start, confirmed: confirmed}
		if p, ok := q.(placeHolder); ok {
			place := p.place(owner)
			spec.place = &place
		}
		for {
			r, from, err := c.waitFor(ctx, cfg, spec)
			spec.first = nil
			if err != nil {
				return nil, err
			}
			l, err := c.leaseFor(ctx, q, cfg, owner, r, from)
			if errors.Is(err, errGrantExpired) {
				if ctx.Err() != nil {
					return nil, errs.WaitEnded(ctx, name, start, 0, nil)
				}
				st.grantExpired(r.fence) // nor may a copy of it, heard later
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
	if !r.granted {
		return nil, &errs.NotObtainedError{Name: name, HolderTTL: r.pttl, QueuedAhead: r.queuedAhead}
	}
	return c.leaseFor(ctx, q, cfg, owner, r, start)
}

// leaseMaker is a queuedLock that builds its own leases from grants (the
// reentrant lock shares one renewal among nested holds).
type leaseMaker interface {
	makeLease(ctx context.Context, cfg *config, owner string, r attemptResult, from time.Time) (*Lease, error)
}

// leaseFor turns a grant into a lease.
func (c *Client) leaseFor(ctx context.Context, q queuedLock, cfg *config, owner string, r attemptResult, from time.Time) (*Lease, error) {
	var l *Lease
	var err error
	if m, ok := q.(leaseMaker); ok {
		l, err = m.makeLease(ctx, cfg, owner, r, from)
	} else {
		l, err = newLease(ctx, c.wd, q, cfg, owner, r.fence, from, r.pttl)
	}
	if err == nil && r.grantedAtUs > 0 {
		l.handoff = time.Since(time.UnixMicro(r.grantedAtUs))
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

// ownerWait is what the waits for one owner value know about it, kept
// across the waitFor calls made for that owner: a Lock that waits again
// after a grant it could not claim, a local waiter that takes over its
// head's place (contend.go). A new waitFor call must not forget it: a grant
// to the owner heard late, or heard twice (a release delivers it both from
// its reply and by pub/sub), would pass for new.
type ownerWait struct {
	// since is no later than any grant to the owner not yet ruled out: the
	// start of the last attempt that found the lock taken, or of the wait.
	since time.Time
	// lastFence is the highest token that such an attempt saw issued, or
	// that a grant the owner could not claim carried: a grant with a token
	// no higher is over (see waitFor).
	lastFence int64
	// answered: Redis answered an attempt (errs.NoAnswer otherwise).
	answered bool
	// pending are attempts for the owner that were still on their way
	// when their caller stopped waiting (driver.InFlightError): its
	// clean-up waits for them (abandon).
	pending []<-chan struct{}
}

// grantExpired rules out a grant to the owner that expired before it was
// claimed, and any copy of it heard later.
func (o *ownerWait) grantExpired(fence int64) {
	o.lastFence = max(o.lastFence, fence)
	o.answered = true
}

// noteInFlight keeps the Done of an attempt err says is still on its way.
func (o *ownerWait) noteInFlight(err error) {
	if done := inFlightDone(err); done != nil {
		o.pending = append(o.pending, done)
	}
}

// inFlightDone returns the Done of the call err says is still on its way
// (a driver.InFlightError), or nil.
func inFlightDone(err error) <-chan struct{} {
	var inFlight *driver.InFlightError
	if errors.As(err, &inFlight) {
		return inFlight.Done
	}
	return nil
}

// waitSpec describes one wait for waitFor.
type waitSpec struct {
	name    string // for errors and logs
	verb    string // the operation, for errors: "Lock" when empty
	channel string // where wake-ups for this wait are published
	// owner is who grants are addressed to on channel; a wait for a
	// condition (no grant) still needs a unique one.
	owner string
	// state is what earlier waits for owner learnt; nil for a wait of its
	// own. waitFor keeps it up to date.
	state *ownerWait
	// attempt asks the server; granted ends the wait. A queued primitive
	// also joins or refreshes its place in the queue here.
	attempt func(ctx context.Context) (attemptResult, error)
	// abandon cleans up after a wait that ends without success; cause is
	// the error that ended it, nil for the context or Close. Attempts
	// still on their way are in state.pending. May be nil.
	abandon func(cause error)
	// first, when set, is an attempt already made (not granted) before the
	// wait: waitFor starts from its outcome instead of attempting again.
	first *firstAttempt
	// noteErr, when set, hears each failure waitFor retries, and nil once
	// an attempt succeeds again (a queue's head tells the waiters behind it).
	noteErr func(error)
	// place, when set, is the waiter's place in the lock's queue, which
	// attempt joins or refreshes: it is kept with the Client's other
	// waiters on the lock (places.go).
	place *placeSpec
}

// firstAttempt is an attempt made before waitFor registered its waiter.
type firstAttempt struct {
	result    attemptResult
	err       error
	start     time.Time
	confirmed bool // the channel's subscription was in place before it
}

// waitFor is the one waiting path of every primitive: attempt, and until an
// attempt succeeds or a grant arrives, wait for a wake-up by pub/sub (or by
// polling, with SpinWait or when pub/sub is unavailable), polling anyway at
// a slow pace so a lost message costs latency, never a hang. It returns the
// successful result and a time no later than the grant: the start of the
// attempt that succeeded, or, for a grant heard by pub/sub, the start of the
// last attempt that had not been granted. The grant came after the server
// processed that attempt, so validity computed from there never
// overestimates: a grant whose token is no higher than the last one that
// attempt saw issued came before it, was heard late, and is ignored (the
// attempt, finding the lock taken, shows that grant was over).
func (c *Client) waitFor(ctx context.Context, cfg *config, spec waitSpec) (attemptResult, time.Time, error) {
	began := time.Now()
	if spec.first != nil {
		began = spec.first.start // the wait, as the caller sees it, began with that attempt
	}
	var signal <-chan struct{}
	var w *notify.Waiter
	notify := !cfg.wait.spin
	if notify {
		// Register before the first attempt: a grant published between
		// that attempt's reply and a later registration would be lost.
		w = c.notify.Register(spec.channel, spec.owner)
		defer c.notify.Unregister(spec.channel, w)
		signal = w.Signal
	}
	abandon := func(cause error) {
		if spec.abandon != nil {
			spec.abandon(cause)
		}
	}
	st := spec.state
	if st == nil {
		st = &ownerWait{}
	}
	if st.since.IsZero() {
		st.since = began // no grant can predate this
	}
	var (
		holderTTL  time.Duration
		lastErr    error
		subscribed = !notify
		// confirmedBefore: the subscription was in place when the last
		// attempt began, so no wake-up since then went unheard.
		confirmedBefore bool
		sub             subscribing // the subscription being made, if any
		spin            = newSpinDelay(cfg.wait)
		errDelay        = newErrorDelay()
	)
	defer sub.stop()
	ended := func() error { return errs.WaitEnded(ctx, spec.name, began, holderTTL, lastErr) }
	// The waiter's place in its lock's group (places.go), once its first
	// attempt has queued it; refresh is the pace of its lease's renewals.
	var (
		member   *placeMember
		refresh  = cfg.refresh()
		lastKeep time.Time
	)
	defer func() {
		if member != nil {
			c.places.leave(member)
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var (
			start time.Time
			r     attemptResult
			err   error
		)
		if f := spec.first; f != nil {
			spec.first = nil
			start, confirmedBefore, r, err = f.start, f.confirmed, f.result, f.err
		} else {
			start = time.Now()
			confirmedBefore = subscribed || c.notify.Confirmed(spec.channel)
			countAttempt(ctx, cfg)
			r, err = spec.attempt(ctx)
		}
		var delay time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil {
				if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
					lastErr = err
				} else if !st.answered && lastErr == nil {
					lastErr = errs.NoAnswer
				}
				st.noteInFlight(err)
				abandon(nil)
				return attemptResult{}, time.Time{}, ended()
			}
			if !errs.IsTransient(err) {
				abandon(err)
				verb := spec.verb
				if verb == "" {
					verb = "Lock"
				}
				return attemptResult{}, time.Time{}, errs.Redis(verb, spec.name, err)
			}
			lastErr = err
			if spec.noteErr != nil {
				spec.noteErr(err)
			}
			delay = errDelay.next()
			cfg.logger.Debug("dlock: attempt failed; retrying", slog.String("lock", spec.name), slog.Any("error", err))
		case r.granted:
			return r, start, nil
		default:
			st.answered = true
			if lastErr != nil && spec.noteErr != nil {
				spec.noteErr(nil)
			}
			st.since, holderTTL, lastErr = start, r.pttl, nil
			st.lastFence = max(st.lastFence, r.lastFence)
			errDelay = newErrorDelay()
			delay = c.pollDelay(cfg, r.pttl, spin)
			if spec.place != nil && spin == nil {
				if member == nil {
					member = c.places.join(*spec.place, cfg.waiterLease, refresh)
				}
				c.places.kept(member, start)
				if !c.places.leads(member) {
					delay = lookAgainIn(refresh/2, 0) // only to check that the leader keeps the place
				} else if time.Since(lastKeep) >= refresh-refresh/10 {
					lastKeep = time.Now()
					c.keepPlaces(ctx, cfg, member)
				}
			}
			if !subscribed && sub.done == nil {
				// Made beside the wait, not before it: the waiter goes on
				// polling, which refreshes its place in the queue, while a
				// slow server confirms (a confirmation slower than the
				// waiter lease cost the place). Bounded, so that a
				// confirmation the network lost (the connection lived on)
				// costs a poll, not the rest of the wait: the next poll
				// subscribes again.
				sub.start(ctx, max(delay, minSubscribeWait), c.notify, spec.channel)
			}
		}
		if delay == 0 {
			continue
		}
		timer.Reset(delay)
		var gone <-chan struct{}
		if member != nil {
			gone = member.gone
		}
	wait:
		for {
			select {
			case <-signal:
				if g, ok := w.TakeGrant(); ok {
					if g.Fence > st.lastFence {
						from := st.since
						if member != nil {
							// A waiter whose place the leader keeps
							// attempts rarely: the leader's last keep
							// that found it still queued is later, and
							// as safe (before, a grant heard half a
							// second after the waiter's last attempt
							// came with its claim window already over).
							from = c.places.since(member, from)
						}
						return attemptResult{granted: true, fence: g.Fence, pttl: g.PX, grantedAtUs: g.AtUs}, from, nil
					}
					// Made before an attempt that then found the lock
					// taken, and heard only now (the subscription lagged):
					// the grant was over by that attempt, or it would have
					// been granted. Taken for new, it would count its
					// validity from after the attempt, and could overlap
					// the holder that attempt saw.
					cfg.logger.Debug("dlock: ignoring a grant heard after a later attempt found the lock taken",
						slog.String("lock", spec.name), slog.Int64("token", g.Fence), slog.Int64("last token seen", st.lastFence))
				}
				break wait
			case <-timer.C:
				if member != nil && !c.places.leads(member) && !c.places.stale(member, refresh) {
					timer.Reset(lookAgainIn(refresh/2, 0)) // the leader keeps the place
					continue wait
				}
				break wait
			case <-gone:
				break wait // no longer queued: granted, or the place lapsed
			case err := <-sub.done:
				sub.end()
				switch {
				case err == nil:
					subscribed = true
					if !confirmedBefore {
						// A wake-up published before the subscription
						// was in place went unheard: ask once more now.
						break wait
					}
				case ctx.Err() != nil:
					// ctx.Done ends the wait.
				case errors.Is(err, ErrClosed):
					abandon(nil)
					return attemptResult{}, time.Time{}, errors.Join(ErrClosed, ended())
				default:
					// No pub/sub (a proxy may refuse it): keep polling.
					cfg.logger.Warn("dlock: cannot subscribe; waiting by polling", slog.String("lock", spec.name), slog.Any("error", err))
					lastErr = err
				}
			case <-ctx.Done():
				abandon(nil)
				return attemptResult{}, time.Time{}, ended()
			case <-c.closed:
				abandon(nil)
				return attemptResult{}, time.Time{}, errors.Join(ErrClosed, ended())
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// subscribing is a wait's subscription to its channel while the server has
// not confirmed it: made in a goroutine of the wait's, so that the wait
// goes on meanwhile. Its zero value is no subscription being made.
type subscribing struct {
	done   chan error // the outcome, once; nil when none is being made
	cancel context.CancelFunc
}

// start subscribes n to channel, giving up after limit or when ctx ends.
func (s *subscribing) start(ctx context.Context, limit time.Duration, n *notify.Notifier, channel string) {
	sctx, cancel := context.WithTimeout(ctx, limit)
	done := make(chan error, 1)
	s.done, s.cancel = done, cancel
	go func() { done <- n.Subscribe(sctx, channel) }()
}

// end forgets the subscription once its outcome was received.
func (s *subscribing) end() {
	s.cancel()
	s.done, s.cancel = nil, nil
}

// stop ends a subscription still being made, and waits for its goroutine.
func (s *subscribing) stop() {
	if s.done != nil {
		s.cancel()
		<-s.done
		s.end()
	}
}

// minSubscribeWait is the least time a waiter gives the server to confirm
// its subscription before it polls instead (waitFor): the poll delay, or
// this when that is shorter.
const minSubscribeWait = time.Second

// newErrorDelay spaces retries after failures to reach Redis.
func newErrorDelay() *spinDelay { return newSpinDelay(SpinWait(5*time.Millisecond, time.Second)) }

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
func (c *Client) abandon(ctx context.Context, q queuedLock, cfg *config, owner string, cause error, st *ownerWait) {
	if cause != nil && (errs.IsConflict(cause) || errors.Is(cause, ErrReplicaAck)) {
		return
	}
	var pending []<-chan struct{}
	if st != nil {
		pending = append(pending, st.pending...)
	}
	if done := inFlightDone(cause); done != nil {
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

// pollDelay is how long a waiter waits before asking the server again. It
// must refresh its place in the queue well within the waiter lease, and it
// looks again when the holder's key expires, in case the holder died
// without releasing (nobody would publish then).
//
// It is also how stale a waiter's lower bound on a grant's time can get (see
// waitFor), so it stays within a third of the claim window: a grant heard by
// pub/sub then leaves about two thirds of the window to claim the lock.
func (c *Client) pollDelay(cfg *config, holderTTL time.Duration, spin *spinDelay) time.Duration {
	refresh := cfg.refresh()
	if spin != nil {
		if d := spin.next(); d < refresh {
			return d
		}
		return refresh
	}
	return lookAgainIn(refresh, holderTTL)
}

// lookAgainIn is when a waiter that is woken by releases asks the server
// again anyway: just after the holder's key expires (holderTTL, 0 unknown),
// in case the holder died without releasing (nobody would publish then),
// and at least every limit; up to 10% later, so waiters of one lock spread
// out.
func lookAgainIn(limit, holderTTL time.Duration) time.Duration {
	d := limit
	if holderTTL > 0 && holderTTL < d {
		d = holderTTL + time.Millisecond
	}
	return d + time.Duration(rand.Int63n(int64(d/10)+1))
}

// spinDelay produces exponentially growing delays with jitter.
type spinDelay struct {
	cur, max time.Duration
}

// newSpinDelay returns nil for the notify strategy.
func newSpinDelay(s WaitStrategy) *spinDelay {
	if !s.spin {
		return nil
	}
	return &spinDelay{cur: s.minDelay, max: s.maxDelay}
}

// next returns a delay between half and all of the current step ("equal
// jitter"), then doubles the step up to the maximum.
func (s *spinDelay) next() time.Duration {
	d := s.cur/2 + time.Duration(rand.Int63n(int64(s.cur/2)+1))
	if s.cur *= 2; s.cur > s.max {
		s.cur = s.max
	}
	return d
}
