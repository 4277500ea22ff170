package protocol

import (
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/scripts"
)

// QueueKeep is queue_keep.lua's call: it renews, for lease, the queue
// leases of the n waiters member(0..n-1) of a lock's queue (keys: queue,
// waiters). The caller runs it, with others in a batch, and reads it with
// QueueKeepReply.
func QueueKeep(queue, waiters string, lease time.Duration, n int, member func(i int) string) *driver.Call {
	args := make([]any, 1, n+1)
	args[0] = lease.Milliseconds()
	for i := 0; i < n; i++ {
		args = append(args, member(i))
	}
	return &driver.Call{Script: scripts.QueueKeep, Keys: []string{queue, waiters}, Args: args}
}

// Kept is queue_keep's answer: which of the waiters it renewed.
type Kept []any

// Has reports whether waiter i is still queued, its lease renewed.
func (k Kept) Has(i int) bool {
	v, _ := k[i].(int64)
	return v == 1
}

// QueueKeepReply reads the reply of a QueueKeep call for n waiters.
func QueueKeepReply(call *driver.Call, n int) (Kept, error) {
	kept, ok := call.Reply.([]any)
	if call.Err != nil || !ok || len(kept) != n {
		if call.Err != nil {
			return nil, call.Err
		}
		return nil, errs.Unexpected(call.Reply)
	}
	return kept, nil
}
