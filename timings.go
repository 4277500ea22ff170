package dlock

import "strconv"

// timingsKey is what the Mutex scripts' timings argument says, in ms: the
// waiter lease, the claim window and the fence retention.
type timingsKey struct{ waiterLease, claimWindow, fenceRetention int64 }

func (c *config) timingsKey() timingsKey {
	return timingsKey{c.waiterLease.Milliseconds(), c.claimWindow().Milliseconds(), fenceRetention(c.ttl).Milliseconds()}
}

// String is the timings argument itself (mutex_acquire.lua).
func (k timingsKey) String() string {
	b := make([]byte, 0, 32)
	b = strconv.AppendInt(b, k.waiterLease, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, k.claimWindow, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, k.fenceRetention, 10)
	return string(b)
}
