package dlock

import (
	"math/rand"
	"time"
)

// newErrorDelay spaces retries after failures to reach Redis.
func newErrorDelay() *spinDelay { return newSpinDelay(SpinWait(5*time.Millisecond, time.Second)) }

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
