package wait

import (
	"math/rand"
	"time"
)

// LookAgainIn is when a waiter that is woken by releases asks the server
// again anyway: just after the holder's key expires (holderTTL, 0 unknown),
// in case the holder died without releasing (nobody would publish then),
// and at least every limit; up to 10% later, so waiters of one lock spread
// out.
func LookAgainIn(limit, holderTTL time.Duration) time.Duration {
	d := limit
	if holderTTL > 0 && holderTTL < d {
		d = holderTTL + time.Millisecond
	}
	return d + time.Duration(rand.Int63n(int64(d/10)+1))
}

// Spin produces exponentially growing delays with jitter.
type Spin struct {
	cur, max time.Duration
}

// NewSpin returns delays from minDelay growing to maxDelay.
func NewSpin(minDelay, maxDelay time.Duration) *Spin {
	return &Spin{cur: minDelay, max: maxDelay}
}

// ErrorDelay spaces retries after failures to reach Redis.
func ErrorDelay() *Spin { return NewSpin(5*time.Millisecond, time.Second) }

// Next returns a delay between half and all of the current step ("equal
// jitter"), then doubles the step up to the maximum.
func (s *Spin) Next() time.Duration {
	d := s.cur/2 + time.Duration(rand.Int63n(int64(s.cur/2)+1))
	if s.cur *= 2; s.cur > s.max {
		s.cur = s.max
	}
	return d
}

// StopTimer stops t and drains a tick it already sent, so that a Reset
// starts clean.
func StopTimer(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
}
