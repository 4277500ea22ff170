package protocol

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/scripts"
)

// MultiTake is multi_acquire.lua's answer.
type MultiTake struct {
	// Busy is, when none was taken, the 1-based index of a lock in the
	// way, and HolderTTL its holder's time left (0: free, but others
	// queued first).
	Busy      int
	HolderTTL time.Duration
	// Acked is how many replicas acknowledged the call's writes, when its
	// Ack asked.
	Acked int
	// Failed is the call's own error (a transport failure or an error
	// reply): the script may have run.
	Failed error
}

// MultiAcquire runs multi_acquire.lua: it takes the mutexes of one slot
// whose keys are locks (each lock's lock, fence, queue and waiters keys)
// for owner, all or none, for px; retention is how long the fencing keys
// last. When all were taken, their tokens are in fences, which has a
// place for each lock.
func MultiAcquire(ctx context.Context, drv driver.Driver, locks [][4]string, owner string, px, retention time.Duration, ack Ack, fences []int64) (MultiTake, error) {
	n := len(locks)
	call := &multiCall{px: px.Milliseconds(), retention: retention.Milliseconds()}
	call.Script, call.Keys, call.member = scripts.MultiAcquire, multiKeys(call.keys[:0], locks), owner
	call.setArgs(&call.member, &call.px, &call.retention)
	call.run(ctx, drv, ack)
	if call.Err != nil {
		return MultiTake{Failed: call.Err}, call.Err
	}
	items, ok := call.Reply.([]any)
	if !ok || len(items) == 0 {
		return MultiTake{}, errs.Unexpected(call.Reply)
	}
	if mark, _ := items[0].(string); mark == "busy" {
		busy, ttl := int64(0), int64(-1)
		if len(items) == 3 {
			busy, _ = items[1].(int64)
			ttl, _ = items[2].(int64)
		}
		if busy < 1 || int(busy) > n || ttl < 0 {
			return MultiTake{}, errs.Unexpected(call.Reply)
		}
		return MultiTake{Busy: int(busy), HolderTTL: Millis(ttl)}, nil
	}
	if len(items) < n || len(fences) < n {
		return MultiTake{}, errs.Unexpected(call.Reply)
	}
	for i := 0; i < n; i++ {
		v, ok := items[i].(int64)
		if !ok {
			return MultiTake{}, errs.Unexpected(call.Reply)
		}
		fences[i] = v
	}
	return MultiTake{Acked: call.Acked}, nil
}

// multiCall is multi_acquire.lua's call, with the values its arguments
// point to and, for a few locks, its keys: one allocation (Call).
type multiCall struct {
	Call
	px, retention int64
	keys          [8]string
}

// multiKeys appends to dst the keys of locks (each lock's lock, fence,
// queue and waiters keys, in turn) as multi_acquire.lua takes them: by
// kind.
func multiKeys(dst []string, locks [][4]string) []string {
	n := len(locks)
	if cap(dst)-len(dst) < 4*n {
		dst = make([]string, 0, 4*n)
	}
	keys := dst[len(dst) : len(dst)+4*n]
	for i, k := range locks {
		for j, key := range k {
			keys[j*n+i] = key
		}
	}
	return keys
}

// MultiRelease runs multi_release.lua for owner on n locks of one slot:
// keys are their lock keys, then their queue keys, in the same order. It
// releases every lock owner holds that nobody waits for, and returns the
// indexes (0-based) of the locks it left for MutexRelease: none when it
// released them all. resent reports that the Redis client sent the script
// more than once (driver.Call.Resent), so a lock left as not owner's may
// be one its first sending released.
func MultiRelease(ctx context.Context, drv driver.Driver, keys []string, owner string) (left []int, resent bool, err error) {
	c := newCall(scripts.MultiRelease, keys, owner)
	c.setArgs(&c.member)
	c.run(ctx, drv, Ack{})
	if c.Err != nil {
		return nil, c.Resent, c.Err
	}
	if code, ok := c.Reply.(int64); ok && code == 1 {
		return nil, c.Resent, nil
	}
	n := len(keys) / 2
	items, ok := c.Reply.([]any)
	if !ok || len(items) != n {
		return nil, c.Resent, errs.Unexpected(c.Reply)
	}
	for i, v := range items {
		switch r, _ := v.(int64); r {
		case 0:
			left = append(left, i)
		case 1:
		default:
			return nil, c.Resent, errs.Unexpected(c.Reply)
		}
	}
	return left, c.Resent, nil
}
