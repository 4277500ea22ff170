package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/scripts"
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
// remembers the calls of the last minute). An expired latch reads as zero,
// and ends with ErrLatchExpired the waits that saw it counting, so choose a
// TTL longer than the longest gap between count-downs. The last CountDown
// deletes the key and wakes the waiters through the Client's shared
// subscription; waiters also check the count every WithWaiterLease/3 and
// when the key would expire, so a lost message costs latency, never a hang.
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
			cfg.fail(invalidArgf("Latch(%q): nil Option", name))
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
		l.err = errorf("dlock: Latch: %w", err)
	} else if err := cfg.err(); err != nil {
		l.err = errorf("dlock: Latch(%q): %w", name, err)
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
// ErrClosed, or the failure to reach Redis.
func (l *Latch) TrySetCount(ctx context.Context, n int64) (bool, error) {
	if err := l.usable(); err != nil {
		return false, err
	}
	if n < 1 || n > maxLatchCount {
		return false, errorf("dlock: TrySetCount %q: %w", l.name, invalidArgf("count %d: want between 1 and %d", n, int64(maxLatchCount)))
	}
	id, err := newCallID()
	if err != nil {
		return false, err
	}
	call := &driver.Call{
		Script: scripts.LatchTrySet,
		Keys:   []string{l.key, l.callsKey(), l.zeroKey()},
		Args:   []any{n, l.ttl.Milliseconds(), id, latchCallMemory.Milliseconds()},
	}
	l.runOnce(ctx, call)
	if call.Err != nil {
		return false, redisError("TrySetCount", l.name, call.Err)
	}
	set, ok := call.Reply.(int64)
	if !ok {
		return false, redisError("TrySetCount", l.name, unexpectedReply(call.Reply))
	}
	return set == 1, nil
}

// CountDown decrements the count and renews the latch's TTL. When the count
// reaches zero the latch is deleted and every waiter, in every process, is
// woken. Counting down a latch at zero does nothing and returns nil. It
// returns ErrInvalidArgument for an invalid latch, ErrKeyConflict,
// ErrClosed, or the failure to reach Redis (the count may then have been
// decremented or not).
func (l *Latch) CountDown(ctx context.Context) error {
	if err := l.usable(); err != nil {
		return err
	}
	id, err := newCallID()
	if err != nil {
		return err
	}
	call := &driver.Call{
		Script: scripts.LatchCountDown,
		Keys:   []string{l.key, l.callsKey(), l.zeroKey()},
		Args:   []any{l.ttl.Milliseconds(), l.c.drv.PublishCommand(), l.key, id, latchCallMemory.Milliseconds()},
	}
	l.runOnce(ctx, call)
	if call.Err != nil {
		return redisError("CountDown", l.name, call.Err)
	}
	if _, ok := call.Reply.(int64); !ok {
		return redisError("CountDown", l.name, unexpectedReply(call.Reply))
	}
	return nil
}

// callsKey is the key of the latch's recent calls (latch_lib.lua).
func (l *Latch) callsKey() string { return l.key + ":calls" }

// zeroKey is the key that marks a count a CountDown took to zero
// (latch_lib.lua).
func (l *Latch) zeroKey() string { return l.key + ":zero" }

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
	n, _, _, err := l.read(ctx)
	if err != nil {
		return 0, redisError("Count", l.name, err)
	}
	return n, nil
}

// Wait returns nil once the count is zero (at once if it already is),
// waiting as long as ctx allows. A latch that Wait saw counting and that
// then expired, rather than being counted down to zero, ends the wait with
// ErrLatchExpired: whatever it counted did not all happen. (A latch read
// for the first time at zero, never set or expired, returns nil: the latch
// cannot tell those apart.) When ctx ends first, the error matches both
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
		return waitEnded(ctx, l.name, time.Now(), 0, nil)
	}
	// The owner only tells this wait apart in the notifier: no grant is
	// ever addressed to it.
	owner, err := newOwner("")
	if err != nil {
		return err
	}
	var (
		began    = time.Now()
		lastSeen int64 // the last count above zero read, 0 before any
		expired  bool
	)
	_, _, err = l.c.waitFor(ctx, &l.cfg, waitSpec{
		verb:    "Wait",
		name:    l.name,
		channel: l.key,
		owner:   owner,
		attempt: func(ctx context.Context) (attemptResult, error) {
			n, pttl, zeroed, err := l.read(ctx)
			if err != nil {
				return attemptResult{}, err
			}
			if n > 0 {
				lastSeen = n
			}
			// Seen counting, now gone, and no CountDown took it to
			// zero: it expired. (The mark of a count-down lasts the
			// latch's TTL, as long as the count itself would have.)
			expired = n == 0 && lastSeen > 0 && !zeroed
			// pttl makes the wait look again when the latch would
			// expire.
			return attemptResult{granted: n == 0, pttl: pttl}, nil
		},
	})
	var e *notObtainedError
	if errors.As(err, &e) {
		e.holderTTL = 0 // the latch's remaining time, not a holder's
	}
	if err == nil && expired {
		return errorf("dlock: Wait %q: %w after waiting %v, with the count last seen at %d: no TrySetCount or CountDown came within its TTL of %v; "+
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

// read runs latch_count: the count, the key's remaining time, and at zero
// whether a CountDown took it there.
func (l *Latch) read(ctx context.Context) (n int64, pttl time.Duration, zeroed bool, err error) {
	call := &driver.Call{Script: scripts.LatchCount, Keys: []string{l.key, l.zeroKey()}}
	l.c.drv.Run(ctx, call)
	if call.Err != nil {
		return 0, 0, false, call.Err
	}
	v, err := replyInts(call.Reply, 3)
	if err != nil {
		return 0, 0, false, err
	}
	return v[0], ms(v[1]), v[2] == 1, nil
}
