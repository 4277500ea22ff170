package protocol

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/scripts"
)

// Attempt is an acquire script's answer.
type Attempt struct {
	Granted bool
	// Fence is the token granted.
	Fence int64
	// PTTL is the hold's time when granted, the holder's time left when
	// not.
	PTTL time.Duration
	// LastFence is, when not granted, the last token issued (0: the reply
	// has none, so every grant is newer).
	LastFence int64
	// Free is, when not granted, what the RWMutex's and the Semaphore's
	// scripts report free: 1 when the lock is free for a writer, or the
	// free permits.
	Free int64
	// Grant is, for a ReentrantMutex granted in the full reply, the id of
	// the hold that took the grant this one joined.
	Grant string
	// Acked is how many replicas acknowledged the call's writes, when its
	// Ack asked.
	Acked int
}

// attempt reads an acquire script's reply: a bare token when its fast path
// took the free lock for fastPX ms, else {1, fence, pttl, ...} granted or
// {0, pttl, ...} not, with the free count next when withFree is set and
// the last token issued after it.
func (c *Call) attempt(fastPX int64, withFree bool) (Attempt, error) {
	if c.Err != nil {
		return Attempt{}, c.Err
	}
	if fence, ok := c.Reply.(int64); ok {
		if fence <= 0 {
			return Attempt{}, errs.Unexpected(c.Reply)
		}
		return Attempt{Granted: true, Fence: fence, PTTL: Millis(fastPX), Acked: c.Acked}, nil
	}
	code, x, y, err := Reply3(c.Reply)
	if err != nil {
		return Attempt{}, err
	}
	if code == 1 {
		return Attempt{Granted: true, Fence: x, PTTL: Millis(y), Acked: c.Acked}, nil
	}
	a := Attempt{PTTL: Millis(x)}
	items := c.Reply.([]any) // Reply3 checked it
	last := 3
	if withFree {
		if len(items) > 3 {
			a.Free, _ = items[3].(int64)
		}
		last = 4
	}
	if len(items) > last {
		a.LastFence, _ = items[last].(int64)
	}
	return a, nil
}

// MutexAcquire runs mutex_acquire.lua for owner on a Mutex's keys (lock,
// fence, queue, waiters): px is the hold's time in ms, join its ARGV[3]
// (Join or JoinNew), mode LockMode's, timings the waiting timings as the
// script takes them.
func MutexAcquire(ctx context.Context, drv driver.Driver, keys [4]string, owner string, px *int64, join, mode any, timings *string, ack Ack) (Attempt, error) {
	c := &Call{keys: keys, member: owner}
	c.Script, c.Keys = scripts.MutexAcquire, c.keys[:]
	c.setArgs(&c.member, px, join, mode, timings)
	c.run(ctx, drv, ack)
	return c.attempt(*px, false)
}

// ReentrantAcquire runs reentrant_acquire.lua for member (a hold id, then
// the owner value) on a ReentrantMutex's keys, with MutexAcquire's
// arguments. Granted in the full reply, Attempt.Grant is the id of the
// hold that took the grant (an ownerid of ownerid.IDLen digits).
func ReentrantAcquire(ctx context.Context, drv driver.Driver, keys []string, member string, px *int64, join, mode any, timings *string, ack Ack) (Attempt, error) {
	c := newCall(scripts.ReentrantAcquire, keys, member)
	c.setArgs(&c.member, px, join, mode, timings)
	c.run(ctx, drv, ack)
	a, err := c.attempt(*px, false)
	if err != nil || !a.Granted {
		return a, err
	}
	if _, ok := c.Reply.(int64); ok {
		return a, nil
	}
	items := c.Reply.([]any) // attempt checked it
	ok := len(items) >= 5
	if ok {
		a.Grant, ok = items[4].(string)
	}
	if !ok || len(a.Grant) != ownerid.IDLen {
		return Attempt{}, errs.Unexpected(c.Reply)
	}
	return a, nil
}

// Timings are a queued lock's timings in the milliseconds its scripts take,
// kept by its descriptor so that calls point at them instead of boxing
// each.
type Timings struct {
	TTL, WaiterLease, ClaimWindow, FenceRetention int64
	// LimitRetention is how long a Semaphore's stored limit outlives its
	// last use.
	LimitRetention int64
}

// RWAcquire runs rw_acquire.lua for member (mode byte, then owner value)
// on an RWMutex's keys: px is the hold's time in ms, timings the waiting
// timings as the scripts take them (mutex_acquire.lua's).
func RWAcquire(ctx context.Context, drv driver.Driver, keys []string, member string, px *int64, queue bool, timings *string, ack Ack) (Attempt, error) {
	c := newCall(scripts.RWAcquire, keys, member)
	c.setArgs(&c.member, px, rwFlags(drv, queue), timings)
	c.run(ctx, drv, ack)
	return c.attempt(*px, true)
}

// rwFlags is rw_acquire.lua's flags argument: join the queue or not, then
// grants announced with PUBLISH or SPUBLISH, in the encoding of the Mutex's
// mode argument (LockMode).
func rwFlags(drv driver.Driver, queue bool) any { return LockMode(drv, queue) }

// SemAcquire runs sem_acquire.lua for owner's n permits of a Semaphore
// given permits; settings is its ARGV[5] (AppendSemSettings), and keys[0] its
// channel. A request over the limit in force is a *LimitError.
func SemAcquire(ctx context.Context, drv driver.Driver, keys []string, owner string, n, permits int, queue bool, ttl *int64, settings *string, ack Ack) (Attempt, error) {
	c := newCall(scripts.SemAcquire, keys, owner)
	c.n = int64(n)
	c.setArgs(&c.member, &c.n, ttl, semJoin(queue, n <= permits), settings)
	c.run(ctx, drv, ack)
	if err := limitError(c.Err, "DLOCK_LIMIT "); err != nil {
		return Attempt{}, err
	}
	return c.attempt(*ttl, true)
}
