package dlock

import (
	"strconv"
	"sync/atomic"
)

// timingsKey is what the Mutex scripts' timings argument says, in ms: the
// waiter lease, the claim window and the fence retention.
type timingsKey struct{ waiterLease, claimWindow, fenceRetention int64 }

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

// maxCachedTimings bounds a timingsCache: a program that computes its TTLs
// (say, from a job's length) could otherwise fill it without end. Past the
// bound, a lock formats its own argument.
const maxCachedTimings = 64

// timingsCache keeps the timings argument of each distinct setting a
// Client's locks use, so that a lock made per call with options (as
// c.Mutex(name, WithTTL(d))) costs what one with the Client's options
// does, instead of formatting the same string again. Reads take no lock:
// the map is replaced, never changed, and a miss races only to store the
// same value.
type timingsCache struct {
	m atomic.Pointer[map[timingsKey]string]
}

// get returns the timings argument for k.
func (tc *timingsCache) get(k timingsKey) string {
	old := tc.m.Load()
	if old != nil {
		if s, ok := (*old)[k]; ok {
			return s
		}
	}
	s := k.String()
	for old == nil || len(*old) < maxCachedTimings {
		m := make(map[timingsKey]string, lenOf(old)+1)
		if old != nil {
			for k, v := range *old {
				m[k] = v
			}
		}
		m[k] = s
		if tc.m.CompareAndSwap(old, &m) {
			break
		}
		if old = tc.m.Load(); old != nil {
			if cached, ok := (*old)[k]; ok {
				return cached
			}
		}
	}
	return s
}

func lenOf(m *map[timingsKey]string) int {
	if m == nil {
		return 0
	}
	return len(*m)
}
