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
	// Fences are the locks' tokens, in order, when all were taken.
	Fences []int64
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

// MultiAcquire runs multi_acquire.lua: it takes n mutexes of one slot for
// owner, all or none, for px; keys are each lock's four keys in turn, and
// retention is how long the fencing keys last.
func MultiAcquire(ctx context.Context, drv driver.Driver, keys []string, n int, owner string, px, retention time.Duration, ack Ack) (MultiTake, error) {
	call := &driver.Call{
		Script: scripts.MultiAcquire,
		Keys:   keys,
		Args:   []any{owner, px.Milliseconds(), retention.Milliseconds()},
	}
	if ack.Replicas > 0 {
		call.Replicas, call.ReplicaTimeout = ack.Replicas, ack.Timeout
	}
	drv.Run(ctx, call)
	if call.Err != nil {
		return MultiTake{Failed: call.Err}, call.Err
	}
	items, ok := call.Reply.([]any)
	if !ok || len(items) == 0 {
		return MultiTake{}, errs.Unexpected(call.Reply)
	}
	if code, _ := items[0].(int64); code == 0 {
		_, busy, ttl, err := Reply3(call.Reply)
		if err != nil || busy < 1 || int(busy) > n {
			return MultiTake{}, errs.Unexpected(call.Reply)
		}
		return MultiTake{Busy: int(busy), HolderTTL: Millis(ttl)}, nil
	}
	v, err := Ints(items, n+1)
	if err != nil {
		return MultiTake{}, err
	}
	return MultiTake{Fences: v[1:], Acked: call.Acked}, nil
}
