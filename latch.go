package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/scripts"
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
// call that took effect, so that the same call sent again has no second
// effect: go-redis sends a command again when it lost the reply (a read
// timeout, a reset connection), and a CountDown counted twice would open
// the latch early. Each call is bounded by it too, since go-redis starts no
// new attempt once the call's context has ended. A minute is far more than
// go-redis's retries take (3 by default, each within its read timeout) and
// keeps the memory small at the rates latches count at: one entry (about
// 140 bytes) per call made in the last minute, so a latch counted down
// 10,000 times a second holds about 80 MB.
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
// The count is one key with an expiry, refreshed by TrySetCount and CountDown
// (24h unless WithTTL is given to Client.Latch), so an abandoned latch
// disappears. A TrySetCount or CountDown takes effect at most once, even when
// the Redis client sends it again after losing its reply (a second key
// remembers the calls of the last minute), and so does one the caller
// retries after an error with the same WithIdempotencyKey. An expired latch
// reads as zero, and ends with ErrLatchExpired the waits that saw it
// counting, so choose a TTL longer than the longest gap between
// count-downs. The last CountDown deletes the key, records that the count
// reached zero, and wakes the waiters through the Client's shared
// subscription; waiters also check the latch every WithWaiterLease/3 and
// when the key would expire, so a lost message costs latency, never a hang.
// A waiter whose count reached zero returns nil even when TrySetCount has
// set the next count by the time it looks: another key numbers the counts
// that reached zero, and lives a TTL (at least a minute) longer than the
// count.
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
	call := &driver.Call{
		Script: scripts.LatchTrySet,
		Keys:   []string{l.key, l.callsKey(), l.zeroKey(), l.roundKey()},
		Args:   []any{n, l.ttl.Milliseconds(), id, latchCallMemory.Milliseconds(), l.roundKeep().Milliseconds()},
	}
	l.runOnce(ctx, call)
	if call.Err != nil {
		return false, errs.Redis("TrySetCount", l.name, call.Err)
	}
	set, ok := call.Reply.(int64)
	if !ok {
		return false, errs.Redis("TrySetCount", l.name, errs.Unexpected(call.Reply))
	}
	return set == 1, nil
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
	call := &driver.Call{
		Script: scripts.LatchCountDown,
		Keys:   []string{l.key, l.callsKey(), l.zeroKey(), l.roundKey()},
		Args: []any{l.ttl.Milliseconds(), l.c.drv.PublishCommand(), l.key, id, latchCallMemory.Milliseconds(),
			l.roundKeep().Milliseconds()},
	}
	l.runOnce(ctx, call)
	if call.Err != nil {
		return errs.Redis("CountDown", l.name, call.Err)
	}
	if _, ok := call.Reply.(int64); !ok {
		return errs.Redis("CountDown", l.name, errs.Unexpected(call.Reply))
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

// runOnce runs a call that changes the latch, within latchCallMemory, so
// that no copy of it the Redis client sends again can arrive after the
// latch forgot it.
func (l *Latch) runOnce(ctx context.Context, call *driver.Call) {
	ctx, cancel := context.WithTimeout(ctx, latchCallMemory)
	defer cancel()
	l.c.drv.Run(ctx, call)
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

// Wait returns nil once the count is zero (at once if it already is),
// waiting as long as ctx allows. Once the count Wait saw reached zero, it
// returns nil even if a TrySetCount has set a new count since (when an
// older dlock counted it down, only if this version's TrySetCount set the
// new one). A latch that Wait saw counting and that then expired, rather
// than being counted down to zero, ends the wait with ErrLatchExpired, even
// if a new count was set since: whatever it counted did not all happen. (A
// latch read for the first time at zero, never set or expired, returns nil:
// the latch cannot tell those apart.) When ctx ends first, the error matches both
// ErrNotObtained (what was waited for was not obtained, as for a lock) and
// ctx's error. Failures to reach Redis are retried while ctx allows (the last
// one is part of the final error); other errors are returned at once:
// ErrInvalidArgument, ErrKeyConflict, ErrClosed. Wait leaves nothing behind
// in Redis.
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
	call := &driver.Call{Script: scripts.LatchCount, Keys: []string{l.key, l.zeroKey(), l.roundKey()}}
	l.c.drv.Run(ctx, call)
	if call.Err != nil {
		return latchState{}, call.Err
	}
	v, err := replyInts(call.Reply, 7)
	if err != nil {
		return latchState{}, err
	}
	return latchState{
		n: v[0], pttl: ms(v[1]), zeroed: v[2] == 1,
		round: latchRound{epoch: v[3], zeros: v[4], prevEpoch: v[5], prevZeros: v[6]},
	}, nil
}
