package wait

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/notify"
)

// Wait is the one waiting path of every primitive: attempt, and until an
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
func (e *Engine) Wait(ctx context.Context, cfg *Settings, spec Spec) (Result, time.Time, error) {
	w := e.newRun(ctx, cfg, spec)
	defer w.close()
	for {
		var (
			start time.Time
			r     Result
			err   error
		)
		if f := w.spec.First; f != nil {
			w.spec.First = nil
			start, w.confirmedBefore, r, err = f.Start, f.Confirmed, f.Result, f.Err
		} else {
			start = time.Now()
			w.confirmedBefore = w.subscribed || e.Notify.Confirmed(spec.Channel)
			cfg.countAttempt(ctx)
			r, err = spec.Attempt(ctx)
		}
		var delay time.Duration
		switch {
		case err != nil:
			if delay, err = w.failed(err); err != nil {
				return Result{}, time.Time{}, err
			}
		case r.Granted:
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

// run is the state of one Wait call.
type run struct {
	c    *Engine
	ctx  context.Context
	cfg  *Settings
	spec Spec
	st   *Owner

	began  time.Time
	w      *notify.Waiter // nil when waiting by polling (SpinWait)
	signal <-chan struct{}

	holderTTL time.Duration
	lastErr   error
	// subscribed: the subscription is in place (or not wanted);
	// confirmedBefore: it was in place when the last attempt began, so no
	// wake-up since then went unheard.
	subscribed, confirmedBefore bool
	sub                         Subscribing // the subscription being made, if any
	spin, errDelay              *Spin

	// member is the waiter's place in its lock's group (places.go), once
	// its first attempt has queued it; refresh is the pace of its lease's
	// renewals.
	member   *Member
	refresh  time.Duration
	lastKeep time.Time
	timer    *time.Timer
}

func (e *Engine) newRun(ctx context.Context, cfg *Settings, spec Spec) *run {
	w := &run{c: e, ctx: ctx, cfg: cfg, spec: spec, st: spec.State, began: time.Now(),
		spin: cfg.newSpin(), errDelay: ErrorDelay(), refresh: cfg.Refresh, timer: time.NewTimer(time.Hour)}
	if spec.First != nil {
		w.began = spec.First.Start // the wait, as the caller sees it, began with that attempt
	}
	w.subscribed = cfg.Spin
	if !cfg.Spin {
		// Register before the first attempt: a grant published between
		// that attempt's reply and a later registration would be lost.
		w.w = e.Notify.Register(spec.Channel, spec.Owner)
		w.signal = w.w.Signal
	}
	if w.st == nil {
		w.st = &Owner{}
	}
	if w.st.Since.IsZero() {
		w.st.Since = w.began // no grant can predate this
	}
	return w
}

// close releases what the wait holds: its subscription in the making, its
// waiter, its place and its timer.
func (w *run) close() {
	w.timer.Stop()
	if w.member != nil {
		w.c.Places.Leave(w.member)
	}
	w.sub.Stop()
	if w.w != nil {
		w.c.Notify.Unregister(w.spec.Channel, w.w)
	}
}

// abandon cleans up after a wait that ends without success.
func (w *run) abandon(cause error) {
	if w.spec.Abandon != nil {
		w.spec.Abandon(cause)
	}
}

// ended is the error of a wait that its context (or Close) ended.
func (w *run) ended() error {
	return errs.WaitEnded(w.ctx, w.spec.Name, w.began, w.holderTTL, w.lastErr)
}

// failed handles an attempt that failed: the wait ends with an error
// unless the failure is transient, then it returns the delay before the
// next attempt.
func (w *run) failed(err error) (time.Duration, error) {
	if w.ctx.Err() != nil {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			w.lastErr = err
		} else if !w.st.Answered && w.lastErr == nil {
			w.lastErr = errs.ErrNoAnswer
		}
		w.st.NoteInFlight(err)
		w.abandon(nil)
		return 0, w.ended()
	}
	if !errs.IsTransient(err) {
		w.abandon(err)
		verb := w.spec.Verb
		if verb == "" {
			verb = "Lock"
		}
		return 0, errs.Redis(verb, w.spec.Name, err)
	}
	w.lastErr = err
	if w.spec.NoteErr != nil {
		w.spec.NoteErr(err)
	}
	w.cfg.Logger.Debug("dlock: attempt failed; retrying", slog.String("lock", w.spec.Name), slog.Any("error", err))
	return w.errDelay.Next(), nil
}

// taken handles an attempt that found the lock taken (or the condition
// unmet): it keeps the waiter's place and subscription, and returns the
// delay before the next attempt.
func (w *run) taken(start time.Time, r Result) time.Duration {
	c, cfg := w.c, w.cfg
	w.st.Answered = true
	if w.lastErr != nil && w.spec.NoteErr != nil {
		w.spec.NoteErr(nil)
	}
	w.st.Since, w.holderTTL, w.lastErr = start, r.PTTL, nil
	w.st.LastFence = max(w.st.LastFence, r.LastFence)
	w.errDelay = ErrorDelay()
	delay := cfg.pollDelay(r.PTTL, w.spin)
	if w.spec.Place != nil && w.spin == nil {
		if w.member == nil {
			w.member = c.Places.Join(*w.spec.Place, cfg.WaiterLease, w.refresh)
		}
		c.Places.Kept(w.member, start)
		if !c.Places.Leads(w.member) {
			delay = LookAgainIn(w.refresh/2, 0) // only to check that the leader keeps the place
		} else if time.Since(w.lastKeep) >= w.refresh-w.refresh/10 {
			w.lastKeep = time.Now()
			c.Places.Keep(w.ctx, c.Driver, cfg.WaiterLease, cfg.Logger, w.member)
		}
	}
	if !w.subscribed && w.sub.Done == nil {
		// Made beside the wait, not before it: the waiter goes on
		// polling, which refreshes its place in the queue, while a slow
		// server confirms (a confirmation slower than the waiter lease
		// would cost the place). Bounded, so that a confirmation the
		// network lost (the connection lived on) costs a poll, not the
		// rest of the wait: the next poll subscribes again.
		w.sub.Start(w.ctx, max(delay, MinSubscribeWait), c.Notify, w.spec.Channel)
	}
	return delay
}

// sleep waits up to delay for a wake-up. done reports that the wait is
// over, with a grant heard by pub/sub or with an error; otherwise the
// caller attempts again.
func (w *run) sleep(delay time.Duration) (r Result, from time.Time, err error, done bool) {
	c := w.c
	w.timer.Reset(delay)
	defer StopTimer(w.timer)
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
			if w.member != nil && !c.Places.Leads(w.member) && !c.Places.Stale(w.member, w.refresh) {
				w.timer.Reset(LookAgainIn(w.refresh/2, 0)) // the leader keeps the place
				continue
			}
			if d, ok := w.keepSelf(); ok {
				w.timer.Reset(d)
				continue
			}
			return
		case <-gone:
			return // no longer queued: granted, or the place lapsed
		case subErr := <-w.sub.Done:
			w.sub.End()
			again, endErr := w.subscribeEnded(subErr)
			if endErr != nil {
				return Result{}, time.Time{}, endErr, true
			}
			if again {
				return
			}
		case <-w.ctx.Done():
			w.abandon(nil)
			return Result{}, time.Time{}, w.ended(), true
		case <-c.Closed:
			w.abandon(nil)
			return Result{}, time.Time{}, errors.Join(errs.ErrClosed, w.ended()), true
		}
	}
}

// keepSelf renews, instead of an attempt, the places of a leader whose
// lock's key shows whether it is held (Places.KeepSelf), and returns the
// delay before its next look; ok is false when the leader must attempt.
func (w *run) keepSelf() (time.Duration, bool) {
	if w.member == nil || !w.c.Places.Leads(w.member) {
		return 0, false
	}
	pttl, ok := w.c.Places.KeepSelf(w.ctx, w.c.Driver, w.cfg.WaiterLease, w.cfg.Logger, w.member)
	if !ok {
		return 0, false
	}
	w.lastKeep = time.Now()
	w.holderTTL = pttl
	return w.cfg.pollDelay(pttl, nil), true
}

// heard takes a grant heard by pub/sub; ok is false for one that came
// before the last attempt, which found the lock taken, and is ignored.
func (w *run) heard(g *notify.Grant) (Result, time.Time, bool) {
	if g.Fence > w.st.LastFence {
		from := w.st.Since
		if w.member != nil {
			// A waiter whose place the leader keeps attempts rarely: the
			// leader's last keep that found it still queued is later,
			// and as safe, so the grant's claim window counts from there.
			from = w.c.Places.Since(w.member, from)
		}
		return Result{Granted: true, Fence: g.Fence, PTTL: g.PX, GrantedAtUs: g.AtUs}, from, true
	}
	// Made before an attempt that then found the lock taken, and heard
	// only now (the subscription lagged): the grant was over by that
	// attempt, or it would have been granted. Taken for new, it would
	// count its validity from after the attempt, and could overlap the
	// holder that attempt saw.
	w.cfg.Logger.Debug("dlock: ignoring a grant heard after a later attempt found the lock taken",
		slog.String("lock", w.spec.Name), slog.Int64("token", g.Fence), slog.Int64("last token seen", w.st.LastFence))
	return Result{}, time.Time{}, false
}

// subscribeEnded takes the outcome of the subscription being made: again
// reports that the waiter must ask the server now (a wake-up may have
// gone unheard before the subscription was in place); err ends the wait.
func (w *run) subscribeEnded(err error) (again bool, _ error) {
	switch {
	case err == nil:
		w.subscribed = true
		return !w.confirmedBefore, nil
	case w.ctx.Err() != nil:
		// ctx.Done ends the wait.
	case errors.Is(err, errs.ErrClosed):
		w.abandon(nil)
		return false, errors.Join(errs.ErrClosed, w.ended())
	case errors.Is(err, driver.ErrClientClosed):
		// The Redis client closed, maybe before this waiter registered
		// for the wake-up that tells every waiter so: the attempt ends the
		// wait now rather than at the next poll.
		return true, nil
	default:
		// No pub/sub (a proxy may refuse it): keep polling.
		w.cfg.Logger.Warn("dlock: cannot subscribe; waiting by polling", slog.String("lock", w.spec.Name), slog.Any("error", err))
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
// Engine.Wait), so it stays within a third of the claim window: a grant heard by
// pub/sub then leaves about two thirds of the window to claim the lock.
func (cfg *Settings) pollDelay(holderTTL time.Duration, spin *Spin) time.Duration {
	refresh := cfg.Refresh
	if spin != nil {
		if d := spin.Next(); d < refresh {
			return d
		}
		return refresh
	}
	return LookAgainIn(refresh, holderTTL)
}

// Engine is a Client's waiting machinery: its pub/sub subscription, its
// waiters' places, its driver and its end.
type Engine struct {
	Notify *notify.Notifier
	Places *Places
	Driver driver.Driver
	Closed <-chan struct{} // closed by Client.Close
}

// Settings are a wait's options, from its lock's configuration.
type Settings struct {
	// Spin: wait by polling, with delays from SpinMin growing to SpinMax,
	// instead of by pub/sub.
	Spin             bool
	SpinMin, SpinMax time.Duration
	// Refresh is the pace at which a waiter renews its place in the queue;
	// WaiterLease the lease on that place.
	Refresh, WaiterLease time.Duration
	Logger               *slog.Logger
	// CountAttempt, when set, hears each attempt (an Observer's count).
	CountAttempt func(ctx context.Context)
}

func (cfg *Settings) newSpin() *Spin {
	if !cfg.Spin {
		return nil
	}
	return NewSpin(cfg.SpinMin, cfg.SpinMax)
}

func (cfg *Settings) countAttempt(ctx context.Context) {
	if cfg.CountAttempt != nil {
		cfg.CountAttempt(ctx)
	}
}
