package protocol

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/scripts"
)

// Deliver is told of each grant a script reports, so that the caller's own
// waiters learn of theirs ahead of the pub/sub message: the owner value
// granted, its fencing token and its hold's time. A script function calls
// it before it returns and keeps no reference to it.
type Deliver func(owner string, fence int64, px time.Duration)

// Release is a release script's answer besides its error.
type Release struct {
	// Ended reports that the hold is gone: released, handed on, or no
	// longer there (ReentrantRelease).
	Ended bool
	// Held is how many permits the owner holds after SemRelease kept
	// some; 1 when it kept none.
	Held int64
	// Resent reports that the Redis client sent the script more than once
	// (driver.Call.Resent): an errs.ErrNotHeld answer may be the later
	// sending's, after the first released the hold.
	Resent bool
}

// MutexRelease runs mutex_release.lua for owner on a Mutex's keys, with
// MutexAcquire's mode and timings: it releases the lock, handing it to the
// next waiter, or takes owner out of the queue. It returns
// errs.ErrNotHeld when owner neither held it nor waited.
func MutexRelease(ctx context.Context, drv driver.Driver, keys [4]string, owner string, mode any, timings *string, deliver Deliver) (Release, error) {
	c := &Call{keys: keys, member: owner}
	c.Script, c.Keys = scripts.MutexRelease, c.keys[:]
	c.setArgs(&c.member, mode, timings)
	c.run(ctx, drv, Ack{})
	r := Release{Resent: c.Resent}
	if c.Err != nil {
		return r, c.Err
	}
	if code, ok := c.Reply.(int64); ok {
		switch code {
		case 0:
			return r, errs.ErrNotHeld
		case 1:
			return r, nil
		}
		return r, errs.Unexpected(c.Reply)
	}
	items, ok := c.Reply.([]any)
	if !ok || len(items) == 0 {
		return r, errs.Unexpected(c.Reply)
	}
	if code, _ := items[0].(int64); code == 2 && handOff(items, deliver) {
		return r, nil
	}
	return r, errs.Unexpected(c.Reply)
}

// handOff reads a release's {2, fence, px, next} hand-off and tells
// deliver of it; false when it is malformed.
func handOff(items []any, deliver Deliver) bool {
	if len(items) < 4 {
		return false
	}
	_, ok0 := items[0].(int64)
	fence, ok1 := items[1].(int64)
	px, ok2 := items[2].(int64)
	next, ok3 := items[3].(string)
	if !ok0 || !ok1 || !ok2 || !ok3 {
		return false
	}
	deliver(next, fence, Millis(px))
	return true
}

// ReentrantRelease runs reentrant_release.lua: it releases member's hold
// (a hold id, then the owner value), and the lock with the owner's last
// hold, handing it to the next waiter; or takes member out of the queue.
// It returns errs.ErrNotHeld, with Ended, when member neither held nor
// waited.
func ReentrantRelease(ctx context.Context, drv driver.Driver, keys []string, member string, mode any, timings *string, deliver Deliver) (Release, error) {
	c := newCall(scripts.ReentrantRelease, keys, member)
	c.setArgs(&c.member, mode, timings)
	c.run(ctx, drv, Ack{})
	r := Release{Resent: c.Resent}
	if c.Err != nil {
		// A release that freed the lock despite a failed hand-off ended the hold.
		r.Ended = errs.ReleasedAnyway(c.Err)
		return r, c.Err
	}
	if code, ok := c.Reply.(int64); ok { // the fast path: the last hold released
		if code != 1 {
			return r, errs.Unexpected(c.Reply)
		}
		r.Ended = true
		return r, nil
	}
	items, ok := c.Reply.([]any)
	if !ok || len(items) == 0 {
		return r, errs.Unexpected(c.Reply)
	}
	code, _ := items[0].(int64)
	switch code {
	case 0, 4:
		r.Ended = true
		return r, errs.ErrNotHeld
	case 1, 3:
		r.Ended = true
		return r, nil
	case 2:
		r.Ended = true
		if !handOff(items, deliver) {
			return r, errs.Unexpected(c.Reply)
		}
		return r, nil
	}
	return r, errs.Unexpected(c.Reply)
}

// MutexTransfer runs mutex_transfer.lua: it moves the lock from owner to
// next for px and returns next's fencing token, or errs.ErrNotHeld when
// owner no longer holds it. retention is how long the fencing key lasts.
func MutexTransfer(ctx context.Context, drv driver.Driver, lock, fence, owner, next string, px, retention time.Duration) (int64, Release, error) {
	call := &driver.Call{
		Script: scripts.MutexTransfer,
		Keys:   []string{lock, fence},
		Args:   []any{owner, next, px.Milliseconds(), retention.Milliseconds()},
	}
	drv.Run(ctx, call)
	r := Release{Resent: call.Resent}
	if call.Err != nil {
		return 0, r, call.Err
	}
	items, ok := call.Reply.([]any)
	if !ok || len(items) == 0 {
		return 0, r, errs.Unexpected(call.Reply)
	}
	switch code, _ := items[0].(int64); {
	case code == 0:
		return 0, r, errs.ErrNotHeld
	case code == 1 && len(items) >= 2:
		if token, ok := items[1].(int64); ok {
			return token, r, nil
		}
	}
	return 0, r, errs.Unexpected(call.Reply)
}

// RWRelease runs rw_release.lua for member (mode byte, then owner value):
// it releases the holder and grants the waiters that unblocks, or takes
// member out of the queue. It returns errs.ErrNotHeld when member neither
// held nor waited. timings are the waiting timings as the scripts take
// them (mutex_acquire.lua's); grants are announced on the holders key.
func RWRelease(ctx context.Context, drv driver.Driver, keys []string, member string, timings *string, deliver Deliver) (Release, error) {
	c := newCall(scripts.RWRelease, keys, member)
	c.setArgs(&c.member, LockMode(drv, false), timings)
	c.run(ctx, drv, Ack{})
	r := Release{Resent: c.Resent}
	if c.Err != nil {
		return r, c.Err
	}
	if held, ok := c.Reply.(int64); ok && held == 1 { // the fast path: released, nobody waits
		return r, nil
	}
	items, ok := c.Reply.([]any)
	if !ok || len(items) == 0 {
		return r, errs.Unexpected(c.Reply)
	}
	held, ok := items[0].(int64)
	if !ok || !rwGrants(items[1:], deliver) {
		return r, errs.Unexpected(c.Reply)
	}
	if held != 1 {
		return r, errs.ErrNotHeld
	}
	return r, nil
}

// rwGrants tells deliver of the grants an RWMutex script reports as
// {member, fence, px, ...}, naming each by its owner value. It reports
// whether the list was well formed.
func rwGrants(grants []any, deliver Deliver) bool {
	if len(grants)%3 != 0 {
		return false
	}
	for i := 0; i < len(grants); i += 3 {
		member, ok1 := grants[i].(string)
		fence, ok2 := grants[i+1].(int64)
		px, ok3 := grants[i+2].(int64)
		if !ok1 || !ok2 || !ok3 || len(member) < 2 {
			return false
		}
		deliver(member[1:], fence, Millis(px))
	}
	return true
}

// RWDowngrade runs rw_downgrade.lua: it turns writer's hold into reader's
// for px, both members of an RWMutex, announcing on channel, and returns
// the read hold's fencing token, or errs.ErrNotHeld when writer no longer
// holds the lock.
func RWDowngrade(ctx context.Context, drv driver.Driver, keys []string, writer, reader string, px time.Duration, t *Timings, channel string, ack Ack, deliver Deliver) (fence int64, acked int, err error) {
	call := &driver.Call{
		Script: scripts.RWDowngrade,
		Keys:   keys,
		Args:   []any{writer, reader, px.Milliseconds(), &t.FenceRetention, drv.PublishCommand(), channel},
	}
	if ack.Replicas > 0 {
		call.Replicas, call.ReplicaTimeout = ack.Replicas, ack.Timeout
	}
	drv.Run(ctx, call)
	if call.Err != nil {
		return 0, 0, call.Err
	}
	items, ok := call.Reply.([]any)
	if !ok || len(items) == 0 {
		return 0, 0, errs.Unexpected(call.Reply)
	}
	if code, _ := items[0].(int64); code == 0 && len(items) == 1 {
		return 0, 0, errs.ErrNotHeld
	}
	code, ok1 := items[0].(int64)
	fence, ok2 := int64(0), len(items) > 1
	if ok2 {
		fence, ok2 = items[1].(int64)
	}
	if !ok1 || !ok2 || code != 1 || !rwGrants(items[2:], deliver) {
		return 0, 0, errs.Unexpected(call.Reply)
	}
	return fence, call.Acked, nil
}

// ReentrantTransfer runs reentrant_transfer.lua: when member's hold is its
// owner's last, it moves the lock to next for px and returns next's
// fencing token; moved is false when the owner holds other holds too
// (nothing changed), and the error errs.ErrNotHeld when member no longer
// holds the lock.
func ReentrantTransfer(ctx context.Context, drv driver.Driver, lock, fence, holds, member, next string, px, retention time.Duration) (token int64, moved bool, r Release, err error) {
	return transfer(ctx, drv, scripts.ReentrantTransfer, []string{lock, fence, holds},
		member, next, px.Milliseconds(), retention.Milliseconds())
}

// RWTransfer runs rw_transfer.lua: it moves a write lock from member to
// next (both with their mode byte) for px and returns next's fencing
// token, or errs.ErrNotHeld when member no longer holds it.
func RWTransfer(ctx context.Context, drv driver.Driver, holders, fence, tokens, member, next string, px, retention time.Duration) (int64, Release, error) {
	token, _, r, err := transfer(ctx, drv, scripts.RWTransfer, []string{holders, fence, tokens},
		member, next, px.Milliseconds(), retention.Milliseconds())
	return token, r, err
}

// SemTransfer runs sem_transfer.lua: it moves owner's n permits to next
// for px and returns next's fencing token; moved is false when owner
// holds another number of permits (nothing changed), and the error
// errs.ErrNotHeld when it holds none.
func SemTransfer(ctx context.Context, drv driver.Driver, holders, counts, fence, owner, next string, n int, px, retention time.Duration) (token int64, moved bool, r Release, err error) {
	return transfer(ctx, drv, scripts.SemTransfer, []string{holders, counts, fence},
		owner, next, n, px.Milliseconds(), retention.Milliseconds())
}

// transfer runs a local hand-off's script, whose replies are {1, fence}
// moved, {2} or {3, ...} not moved, {0} or {4} not held.
func transfer(ctx context.Context, drv driver.Driver, script *driver.Script, keys []string, args ...any) (int64, bool, Release, error) {
	call := &driver.Call{Script: script, Keys: keys, Args: args}
	drv.Run(ctx, call)
	r := Release{Resent: call.Resent}
	if call.Err != nil {
		return 0, false, r, call.Err
	}
	items, ok := call.Reply.([]any)
	if !ok || len(items) == 0 {
		return 0, false, r, errs.Unexpected(call.Reply)
	}
	switch code, _ := items[0].(int64); {
	case code == 0, code == 4:
		return 0, false, r, errs.ErrNotHeld
	case code == 2, code == 3:
		return 0, false, r, nil
	case code == 1 && len(items) >= 2:
		if token, ok := items[1].(int64); ok {
			return token, true, r, nil
		}
	}
	return 0, false, r, errs.Unexpected(call.Reply)
}
