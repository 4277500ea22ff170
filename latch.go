package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/wait"
)

// defaultLatchTTL is how long a latch lives after its last TrySetCount or
// CountDown unless WithTTL is given to Client.Latch. A latch counts
// events that may be minutes or hours apart (jobs finishing, shards loaded),
// so the 30s lock TTL would make it vanish mid-count; yet an abandoned latch
// must not stay forever.
const defaultLatchTTL = 24 * time.Hour

// maxLatchCount is the largest count a latch accepts: the largest whole
// number Lua's numbers hold exactly.
const maxLatchCount = 1<<53 - 1

// latchCallMemory is how long a latch remembers a TrySetCount or CountDown
// call that took effect, so that the same call sent again (go-redis resends a
// command whose reply it lost) has no second effect. Each call is bounded by
// it too; it is far longer than go-redis's retries take, and the memory holds
// one small entry per call made within it.
const latchCallMemory = time.Minute

// minLatchRoundGrace is the least time a latch's round record
// (latch_lib.lua) outlives its count. A waiter looks again when the count it
// saw would expire, up to a tenth of that later (lookAgainIn) and a round
// trip more; the record lasts a further TTL, and at least this long, so
// that look still finds how the count ended.
const minLatchRoundGrace = time.Minute

// Latch is a distributed count-down latch: TrySetCount sets a count, each
// CountDown decrements it, and Wait returns once it reaches zero, in every
// process that uses the same name on the same Redis. Get one from
// Client.Latch; it is an immutable descriptor, safe for concurrent use, and
// cheap to create per call.
//
// The count expires unless TrySetCount or CountDown refresh it within its TTL
// (24h unless WithTTL is given); an expired latch reads as zero and ends the
// waits that saw it counting with ErrLatchExpired. A TrySetCount or CountDown
// takes effect at most once, even when the Redis client sends it again, and so
// does one retried with the same WithIdempotencyKey. See docs/primitives.md,
// "Latch".
type Latch struct {
	c    *Client
	name string
	cfg  config
	key  string
	ttl  time.Duration
	err  error // invalid name or option, reported on first use
}

// Latch returns the count-down latch called name. opts override the
// Client's defaults for it; only a WithTTL given here sets the latch's
// lifetime (default 24h): a Client-wide WithTTL is meant for locks, and a
// lock-sized TTL would make latches expire, and so release their waiters,
// early. It sends nothing and never fails: an invalid name or option is
// reported as ErrInvalidArgument by the first call that would reach Redis.
// A latch's key is apart from those of a lock or semaphore of the same name.
func (c *Client) Latch(name string, opts ...Option) *Latch {
	cfg := c.cfg
	cfg.errs = nil
	cfg.ttlSet = false
	for _, opt := range opts {
		if opt == nil {
			cfg.fail(errs.InvalidArgf("nil Option"))
			continue
		}
		opt(&cfg)
	}
	if !cfg.ttlSet {
		// Also what the shared waiting loop derives its poll interval
		// from: a Client's short lock TTL must not speed latch polls up.
		cfg.ttl = defaultLatchTTL
	}
	l := &Latch{c: c, name: name, cfg: cfg, key: cfg.keyPrefix + "{" + name + "}:latch", ttl: cfg.ttl}
	if err := checkName(name); err != nil {
		l.err = errs.Errorf("dlock: Latch: %w", err)
	} else if err := cfg.err(); err != nil {
		l.err = errs.Errorf("dlock: Latch(%q): %w", name, err)
	}
	return l
}

// Name returns the latch's name.
func (l *Latch) Name() string { return l.name }

// TrySetCount sets the count to n (between 1 and 2^53−1) if the latch is at
// zero (or absent, or expired), and reports whether it did; a latch still
// counting down is left unchanged and TrySetCount returns false. It returns
// ErrInvalidArgument for n out of range (nothing is sent) or an invalid
// latch, ErrKeyConflict when the key holds something dlock did not write,
// ErrClosed, or the failure to reach Redis (the count may then have been set
// or not: a retry with the same WithIdempotencyKey reports true if it was).
func (l *Latch) TrySetCount(ctx context.Context, n int64) (bool, error) {
	if err := l.usable(); err != nil {
		return false, err
	}
	if n < 1 || n > maxLatchCount {
		return false, errs.Errorf("dlock: TrySetCount %q: %w", l.name, errs.InvalidArgf("count %d: want between 1 and %d", n, int64(maxLatchCount)))
	}
	id, err := changeID(ctx, 's', "TrySetCount", l.name)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, latchCallMemory) // within latchCallMemory: see change
	defer cancel()
	set, err := protocol.LatchTrySet(ctx, l.c.drv, l.scriptKeys(), n, l.change(id))
	if err != nil {
		return false, errs.Redis("TrySetCount", l.name, err)
	}
	return set, nil
}

// CountDown decrements the count and renews the latch's TTL. When the count
// reaches zero the latch is deleted, and every waiter, in every process, is
// woken and returns nil, even if a TrySetCount sets a new count at once.
// Counting down a latch at zero does nothing and returns nil. It
// returns ErrInvalidArgument for an invalid latch, ErrKeyConflict,
// ErrClosed, or the failure to reach Redis (the count may then have been
// decremented or not: a retry with the same WithIdempotencyKey counts once).
func (l *Latch) CountDown(ctx context.Context) error {
	if err := l.usable(); err != nil {
		return err
	}
	id, err := changeID(ctx, 'c', "CountDown", l.name)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, latchCallMemory) // within latchCallMemory: see change
	defer cancel()
	if err := protocol.LatchCountDown(ctx, l.c.drv, l.scriptKeys(), l.change(id)); err != nil {
		return errs.Redis("CountDown", l.name, err)
	}
	return nil
}

// callsKey is the key of the latch's recent calls (latch_lib.lua).
func (l *Latch) callsKey() string { return l.key + ":calls" }

// zeroKey is the key that marks a count a CountDown took to zero
// (latch_lib.lua).
func (l *Latch) zeroKey() string { return l.key + ":zero" }

// roundKey is the key of the latch's round record (latch_lib.lua).
func (l *Latch) roundKey() string { return l.key + ":round" }

// roundKeep is how long the round record lives after a change: the latch's
// TTL plus that TTL again or minLatchRoundGrace, whichever is longer.
func (l *Latch) roundKeep() time.Duration { return l.ttl + max(l.ttl, minLatchRoundGrace) }

// scriptKeys are the latch's keys as its scripts take them.
func (l *Latch) scriptKeys() protocol.LatchKeys {
	return protocol.LatchKeys{Count: l.key, Calls: l.callsKey(), Zero: l.zeroKey(), Round: l.roundKey()}
}

// change is a change of the latch by the call id. Such a call runs within
// latchCallMemory, so that no copy of it the Redis client
// sends again can arrive after the latch forgot it.
func (l *Latch) change(id string) protocol.LatchChange {
	return protocol.LatchChange{ID: id, TTL: l.ttl, Memory: latchCallMemory, RoundTTL: l.roundKeep()}
}

// Count returns the current count: zero once counted down, and for a latch
// never set or expired. It returns ErrInvalidArgument for an invalid latch,
// ErrKeyConflict, ErrClosed, or the failure to reach Redis.
func (l *Latch) Count(ctx context.Context) (int64, error) {
	if err := l.usable(); err != nil {
		return 0, err
	}
	s, err := l.read(ctx)
	if err != nil {
		return 0, errs.Redis("Count", l.name, err)
	}
	return s.n, nil
}

// Wait returns nil once the count is zero (at once if it already is), waiting
// as long as ctx allows; it also returns nil once the count it saw reached
// zero, even if TrySetCount has set a new one since. A count it saw that
// expired instead ends the wait with ErrLatchExpired. When ctx ends first, the
// error matches both ErrNotObtained and ctx's error. Failures to reach Redis
// are retried while ctx allows; ErrInvalidArgument, ErrKeyConflict and
// ErrClosed are returned at once. Wait leaves nothing behind in Redis.
func (l *Latch) Wait(ctx context.Context) error {
	if err := l.usable(); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return errs.WaitEnded(ctx, l.name, time.Now(), 0, nil)
	}
	// The owner only tells this wait apart in the notifier: no grant is
	// ever addressed to it.
	owner, err := ownerid.New("")
	if err != nil {
		return err
	}
	var (
		began    = time.Now()
		lastSeen int64      // the last count above zero read, 0 before any
		seen     latchRound // the round of that count
		expired  bool
	)
	_, _, err = l.c.waits.Wait(ctx, l.cfg.waitSettings(), wait.Spec{
		Verb:    "Wait",
		Name:    l.name,
		Channel: l.key,
		Owner:   owner,
		Attempt: func(ctx context.Context) (wait.Result, error) {
			s, err := l.read(ctx)
			if err != nil {
				return wait.Result{}, err
			}
			if lastSeen > 0 {
				// The count seen may have ended, and a new one begun,
				// since the last look: the round record tells.
				if end := seen.end(s.round); end != roundUnknown {
					expired = end == roundExpired
					return wait.Result{Granted: true}, nil
				}
			}
			if s.n > 0 {
				if lastSeen == 0 || s.round.epoch != seen.epoch {
					seen = s.round
				}
				lastSeen = s.n
				// pttl makes the wait look again when the latch would
				// expire.
				return wait.Result{PTTL: s.pttl}, nil
			}
			// Seen counting, now gone, and no CountDown took it to
			// zero: it expired. (The mark of a count-down lasts the
			// latch's TTL, as long as the count itself would have.)
			expired = lastSeen > 0 && !s.zeroed
			return wait.Result{Granted: true}, nil
		},
	})
	var e *errs.NotObtainedError
	if errors.As(err, &e) {
		e.HolderTTL = 0 // the latch's remaining time, not a holder's
	}
	if err == nil && expired {
		return errs.Errorf("dlock: Wait %q: %w after waiting %v, with the count last seen at %d: no TrySetCount or CountDown came within its TTL of %v; "+
			"if the gaps between count-downs can be longer, give the latch a longer WithTTL",
			l.name, ErrLatchExpired, time.Since(began).Round(time.Millisecond), lastSeen, l.ttl)
	}
	return err
}

// usable reports an invalid latch or a closed Client.
func (l *Latch) usable() error {
	if l.err != nil {
		return l.err
	}
	return l.c.checkOpen("Latch", l.name)
}

// latchState is what latch_count read.
type latchState struct {
	n      int64         // the count
	pttl   time.Duration // the count's remaining time, 0 at zero
	zeroed bool          // at zero: the zero mark is there
	round  latchRound
}

// latchRound is a latch's round record (latch_lib.lua), all zero when there
// is none.
type latchRound struct {
	epoch, zeros         int64
	prevEpoch, prevZeros int64
}

// roundEnd is how a count seen running ended, as far as a round record tells.
type roundEnd int

const (
	roundUnknown roundEnd = iota // not ended, or the record cannot tell
	roundZeroed                  // a CountDown took it to zero
	roundExpired                 // it expired
)

// end tells how the count that was running when r was read has ended, from
// now, a record read since. Within an epoch every count ended at zero, and
// the one that begins the next epoch keeps the last one's zeros. A record
// begun after the count was seen (an older dlock set it, or the record
// lapsed), or two epochs on, cannot tell.
func (r latchRound) end(now latchRound) roundEnd {
	switch {
	case r.epoch == 0:
		return roundUnknown
	case now.epoch == r.epoch && now.zeros > r.zeros:
		return roundZeroed
	case now.epoch == r.epoch:
		return roundUnknown
	case now.prevEpoch != r.epoch:
		return roundUnknown
	case now.prevZeros > r.zeros:
		return roundZeroed
	}
	return roundExpired
}

// read runs latch_count: the count, the key's remaining time, at zero
// whether a CountDown took it there, and the round record.
func (l *Latch) read(ctx context.Context) (latchState, error) {
	v, err := protocol.LatchCount(ctx, l.c.drv, l.scriptKeys())
	if err != nil {
		return latchState{}, err
	}
	return latchState{
		n: v.N, pttl: v.PTTL, zeroed: v.Zeroed,
		round: latchRound{epoch: v.Epoch, zeros: v.Zeros, prevEpoch: v.PrevEpoch, prevZeros: v.PrevZeros},
	}, nil
}
