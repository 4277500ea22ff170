package dlock

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/wait"
)

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
	place *wait.Place
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
	w := c.newWaitRun(ctx, cfg, spec)
	defer w.close()
	for {
		var (
			start time.Time
			r     attemptResult
			err   error
		)
		if f := w.spec.first; f != nil {
			w.spec.first = nil
			start, w.confirmedBefore, r, err = f.start, f.confirmed, f.result, f.err
		} else {
			start = time.Now()
			w.confirmedBefore = w.subscribed || c.notify.Confirmed(spec.channel)
			countAttempt(ctx, cfg)
			r, err = spec.attempt(ctx)
		}
		var delay time.Duration
		switch {
		case err != nil:
			if delay, err = w.failed(err); err != nil {
				return attemptResult{}, time.Time{}, err
			}
		case r.granted:
			return r, start, nil
		default:
			delay = w.taken(start, r)
		}
		if delay == 0 {
			continue
		}
		if r, from, err, done := w.sleep(delay); done {
			return r, from, err
		}
	}
}

// waitRun is the state of one waitFor call.
type waitRun struct {
	c    *Client
	ctx  context.Context
	cfg  *config
	spec waitSpec
	st   *ownerWait

	began  time.Time
	w      *notify.Waiter // nil when waiting by polling (SpinWait)
	signal <-chan struct{}

	holderTTL time.Duration
	lastErr   error
	// subscribed: the subscription is in place (or not wanted);
	// confirmedBefore: it was in place when the last attempt began, so no
	// wake-up since then went unheard.
	subscribed, confirmedBefore bool
	sub                         wait.Subscribing // the subscription being made, if any
	spin, errDelay              *wait.Spin

	// member is the waiter's place in its lock's group (places.go), once
	// its first attempt has queued it; refresh is the pace of its lease's
	// renewals.
	member   *wait.Member
	refresh  time.Duration
	lastKeep time.Time
	timer    *time.Timer
}

func (c *Client) newWaitRun(ctx context.Context, cfg *config, spec waitSpec) *waitRun {
	w := &waitRun{c: c, ctx: ctx, cfg: cfg, spec: spec, st: spec.state, began: time.Now(),
		spin: cfg.wait.newSpin(), errDelay: wait.ErrorDelay(), refresh: cfg.refresh(), timer: time.NewTimer(time.Hour)}
	if spec.first != nil {
		w.began = spec.first.start // the wait, as the caller sees it, began with that attempt
	}
	w.subscribed = cfg.wait.spin
	if !cfg.wait.spin {
		// Register before the first attempt: a grant published between
		// that attempt's reply and a later registration would be lost.
		w.w = c.notify.Register(spec.channel, spec.owner)
		w.signal = w.w.Signal
	}
	if w.st == nil {
		w.st = &ownerWait{}
	}
	if w.st.since.IsZero() {
		w.st.since = w.began // no grant can predate this
	}
	return w
}

// close releases what the wait holds: its subscription in the making, its
// waiter, its place and its timer.
func (w *waitRun) close() {
	w.timer.Stop()
	if w.member != nil {
		w.c.places.Leave(w.member)
	}
	w.sub.Stop()
	if w.w != nil {
		w.c.notify.Unregister(w.spec.channel, w.w)
	}
}

// abandon cleans up after a wait that ends without success.
func (w *waitRun) abandon(cause error) {
	if w.spec.abandon != nil {
		w.spec.abandon(cause)
	}
}

// ended is the error of a wait that its context (or Close) ended.
func (w *waitRun) ended() error {
	return errs.WaitEnded(w.ctx, w.spec.name, w.began, w.holderTTL, w.lastErr)
}

// failed handles an attempt that failed: the wait ends with an error
// unless the failure is transient, then it returns the delay before the
// next attempt.
func (w *waitRun) failed(err error) (time.Duration, error) {
	if w.ctx.Err() != nil {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			w.lastErr = err
		} else if !w.st.answered && w.lastErr == nil {
			w.lastErr = errs.ErrNoAnswer
		}
		w.st.noteInFlight(err)
		w.abandon(nil)
		return 0, w.ended()
	}
	if !errs.IsTransient(err) {
		w.abandon(err)
		verb := w.spec.verb
		if verb == "" {
			verb = "Lock"
		}
		return 0, errs.Redis(verb, w.spec.name, err)
	}
	w.lastErr = err
	if w.spec.noteErr != nil {
		w.spec.noteErr(err)
	}
	w.cfg.logger.Debug("dlock: attempt failed; retrying", slog.String("lock", w.spec.name), slog.Any("error", err))
	return w.errDelay.Next(), nil
}

// taken handles an attempt that found the lock taken (or the condition
// unmet): it keeps the waiter's place and subscription, and returns the
// delay before the next attempt.
func (w *waitRun) taken(start time.Time, r attemptResult) time.Duration {
	c, cfg := w.c, w.cfg
	w.st.answered = true
	if w.lastErr != nil && w.spec.noteErr != nil {
		w.spec.noteErr(nil)
	}
	w.st.since, w.holderTTL, w.lastErr = start, r.pttl, nil
	w.st.lastFence = max(w.st.lastFence, r.lastFence)
	w.errDelay = wait.ErrorDelay()
	delay := pollDelay(cfg, r.pttl, w.spin)
	if w.spec.place != nil && w.spin == nil {
		if w.member == nil {
			w.member = c.places.Join(*w.spec.place, cfg.waiterLease, w.refresh)
		}
		c.places.Kept(w.member, start)
		if !c.places.Leads(w.member) {
			delay = wait.LookAgainIn(w.refresh/2, 0) // only to check that the leader keeps the place
		} else if time.Since(w.lastKeep) >= w.refresh-w.refresh/10 {
			w.lastKeep = time.Now()
			c.places.Keep(w.ctx, c.drv, cfg.waiterLease, cfg.logger, w.member)
		}
	}
	if !w.subscribed && w.sub.Done == nil {
		// Made beside the wait, not before it: the waiter goes on
		// polling, which refreshes its place in the queue, while a slow
		// server confirms (a confirmation slower than the waiter lease
		// would cost the place). Bounded, so that a confirmation the
		// network lost (the connection lived on) costs a poll, not the
		// rest of the wait: the next poll subscribes again.
		w.sub.Start(w.ctx, max(delay, wait.MinSubscribeWait), c.notify, w.spec.channel)
	}
	return delay
}

// sleep waits up to delay for a wake-up. done reports that the wait is
// over, with a grant heard by pub/sub or with an error; otherwise the
// caller attempts again.
func (w *waitRun) sleep(delay time.Duration) (r attemptResult, from time.Time, err error, done bool) {
	c := w.c
	w.timer.Reset(delay)
	defer func() {
		if !w.timer.Stop() {
			select {
			case <-w.timer.C:
			default:
			}
		}
	}()
	var gone <-chan struct{}
	if w.member != nil {
		gone = w.member.Gone
	}
	for {
		select {
		case <-w.signal:
			if g, ok := w.w.TakeGrant(); ok {
				if r, from, ok := w.heard(g); ok {
					return r, from, nil, true
				}
			}
			return
		case <-w.timer.C:
			if w.member != nil && !c.places.Leads(w.member) && !c.places.Stale(w.member, w.refresh) {
				w.timer.Reset(wait.LookAgainIn(w.refresh/2, 0)) // the leader keeps the place
				continue
			}
			return
		case <-gone:
			return // no longer queued: granted, or the place lapsed
		case subErr := <-w.sub.Done:
			w.sub.End()
			again, endErr := w.subscribeEnded(subErr)
			if endErr != nil {
				return attemptResult{}, time.Time{}, endErr, true
			}
			if again {
				return
			}
		case <-w.ctx.Done():
			w.abandon(nil)
			return attemptResult{}, time.Time{}, w.ended(), true
		case <-c.closed:
			w.abandon(nil)
			return attemptResult{}, time.Time{}, errors.Join(ErrClosed, w.ended()), true
		}
	}
}

// heard takes a grant heard by pub/sub; ok is false for one that came
// before the last attempt, which found the lock taken, and is ignored.
func (w *waitRun) heard(g *notify.Grant) (attemptResult, time.Time, bool) {
	if g.Fence > w.st.lastFence {
		from := w.st.since
		if w.member != nil {
			// A waiter whose place the leader keeps attempts rarely: the
			// leader's last keep that found it still queued is later,
			// and as safe, so the grant's claim window counts from there.
			from = w.c.places.Since(w.member, from)
		}
		return attemptResult{granted: true, fence: g.Fence, pttl: g.PX, grantedAtUs: g.AtUs}, from, true
	}
	// Made before an attempt that then found the lock taken, and heard
	// only now (the subscription lagged): the grant was over by that
	// attempt, or it would have been granted. Taken for new, it would
	// count its validity from after the attempt, and could overlap the
	// holder that attempt saw.
	w.cfg.logger.Debug("dlock: ignoring a grant heard after a later attempt found the lock taken",
		slog.String("lock", w.spec.name), slog.Int64("token", g.Fence), slog.Int64("last token seen", w.st.lastFence))
	return attemptResult{}, time.Time{}, false
}

// subscribeEnded takes the outcome of the subscription being made: again
// reports that the waiter must ask the server now (a wake-up may have
// gone unheard before the subscription was in place); err ends the wait.
func (w *waitRun) subscribeEnded(err error) (again bool, _ error) {
	switch {
	case err == nil:
		w.subscribed = true
		return !w.confirmedBefore, nil
	case w.ctx.Err() != nil:
		// ctx.Done ends the wait.
	case errors.Is(err, ErrClosed):
		w.abandon(nil)
		return false, errors.Join(ErrClosed, w.ended())
	default:
		// No pub/sub (a proxy may refuse it): keep polling.
		w.cfg.logger.Warn("dlock: cannot subscribe; waiting by polling", slog.String("lock", w.spec.name), slog.Any("error", err))
		w.lastErr = err
	}
	return false, nil
}

// pollDelay is how long a waiter waits before asking the server again. It
// must refresh its place in the queue well within the waiter lease, and it
// looks again when the holder's key expires, in case the holder died
// without releasing (nobody would publish then).
//
// It is also how stale a waiter's lower bound on a grant's time can get (see
// waitFor), so it stays within a third of the claim window: a grant heard by
// pub/sub then leaves about two thirds of the window to claim the lock.
func pollDelay(cfg *config, holderTTL time.Duration, spin *wait.Spin) time.Duration {
	refresh := cfg.refresh()
	if spin != nil {
		if d := spin.Next(); d < refresh {
			return d
		}
		return refresh
	}
	return wait.LookAgainIn(refresh, holderTTL)
}
