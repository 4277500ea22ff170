package protocol

import (
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/scripts"
)

// QueueKeep is queue_keep.lua's call: it renews, for lease, the queue
// leases of the n waiters member(0..n-1) of a lock's queue (keys: queue,
// waiters), and, when lock is not empty, reads that key's PTTL. The caller
// runs it, with others in a batch, and reads it with QueueKeepReply.
func QueueKeep(queue, waiters, lock string, lease time.Duration, n int, member func(i int) string) *driver.Call {
	args := make([]any, 1, n+1)
	args[0] = lease.Milliseconds()
	for i := 0; i < n; i++ {
		args = append(args, member(i))
	}
	keys := []string{queue, waiters}
	if lock != "" {
		keys = append(keys, lock)
	}
	return &driver.Call{Script: scripts.QueueKeep, Keys: keys, Args: args}
}

// Kept is queue_keep's answer: which of the waiters it renewed, and the
// lock key's PTTL when the call named one.
type Kept struct {
	flags []any
	// LockPTTL is the lock key's remaining time; zero or less when the key
	// is gone (nobody holds the lock) or has no expiry, or was not read.
	LockPTTL time.Duration
}

// Has reports whether waiter i is still queued, its lease renewed.
func (k Kept) Has(i int) bool {
	v, _ := k.flags[i].(int64)
	return v == 1
}

// QueueKeepReply reads the reply of a QueueKeep call for n waiters.
func QueueKeepReply(call *driver.Call, n int) (Kept, error) {
	if call.Err != nil {
		return Kept{}, call.Err
	}
	want := n
	if len(call.Keys) > 2 {
		want++
	}
	flags, ok := call.Reply.([]any)
	if !ok || len(flags) != want {
		return Kept{}, errs.Unexpected(call.Reply)
	}
	k := Kept{flags: flags[:n]}
	if want > n {
		pttl, ok := flags[n].(int64)
		if !ok {
			return Kept{}, errs.Unexpected(call.Reply)
		}
		k.LockPTTL = time.Duration(pttl) * time.Millisecond
	}
	return k, nil
}
