package dlock

import (
	"github.com/dlock-go/dlock/internal/errs"
)

// Errors returned by dlock. Test for them with errors.Is: the returned errors
// wrap them with the lock's name and the details of what happened.
var (
	// ErrNotObtained means the lock was not obtained: TryLock found it held
	// by someone else, or Lock's wait ended first. When the wait ended
	// because of its context, the error also matches the context's error
	// (context.DeadlineExceeded or context.Canceled).
	//
	// TryLock returns a failure to reach Redis as that failure, never
	// matching ErrNotObtained, so "busy" and "broken" are told apart at
	// once. A wait (Lock, Client.Do, Semaphore.Acquire, Latch.Wait, ...)
	// retries such failures while its context allows, so it ends with an
	// error matching ErrNotObtained and the context's error during an
	// outage too. That error also wraps the failure of the wait's last
	// attempt when that attempt failed (an attempt that Redis answers drops
	// the failures before it): its Unwrap() []error lists the context's
	// error, the context's cause when that differs, and that failure, so an
	// outage is told from contention by whether anything else is there.
	ErrNotObtained = errs.ErrNotObtained

	// ErrNotHeld means the lease no longer owns its key: the key expired,
	// was released or force-released, or belongs to another owner now.
	ErrNotHeld = errs.ErrNotHeld

	// ErrLockLost means a lease was lost while held: a renewal found the key
	// gone or taken over, or the local validity deadline passed without a
	// successful renewal (Redis unreachable). Lease.Err and Client.Do wrap it
	// with the reason.
	ErrLockLost = errs.ErrLockLost

	// ErrInvalidArgument means a name, option or argument was rejected as
	// invalid, before anything was sent to Redis; the exceptions are a
	// Semaphore request for more permits than the limit stored in Redis, and
	// a Semaphore.AddPermits that would take that limit out of range, which
	// only the server can tell (see Semaphore.TryAcquire and AddPermits).
	ErrInvalidArgument = errs.ErrInvalidArgument

	// ErrKeyConflict means a lock's key, or a key beside it (its queue,
	// waiters or fencing key), holds something dlock did not write: a value
	// of another type (a list, a hash, ...) or a string without an expiry.
	// dlock never modifies such a key; choose another name or key prefix,
	// or delete the key if it is stale. An acquire that returns it has taken
	// and queued nothing. Unlock returns it after releasing the lock when
	// the foreign key is one beside the lock key (the message says "the lock
	// was released, but ..."): the lock is free, and the lease has ended.
	ErrKeyConflict = errs.ErrKeyConflict

	// ErrClosed means the Client was closed.
	ErrClosed = errs.ErrClosed

	// ErrLatchExpired means a Latch that Wait saw counting down expired
	// before it reached zero: its TTL passed without a TrySetCount or
	// CountDown (a coordinator that stopped counting?). The events it
	// counted did not all happen, as far as the latch knows.
	ErrLatchExpired = errs.ErrLatchExpired

	// ErrReplicaAck means a lock's write reached fewer replicas than
	// WithReplicaAck requires within its timeout. An acquire that gets it
	// has released the lock again; a renewal that gets it did not extend
	// the lease. The error says how many replicas acknowledged.
	ErrReplicaAck = errs.ErrReplicaAck
)

// ErrQuorum means a Redlock operation could not reach enough nodes: fewer
// than a quorum (N/2+1) answered in time and without an error, so whether the
// lock is free or held could not be decided. Returned by TryLock, Extend,
// Unlock or the like, or by a Lock that gives up at once, it never matches
// ErrNotObtained (someone else holds the lock). A RedlockMutex.Lock that
// its context ends returns an error matching ErrNotObtained and the
// context's error, which also matches ErrQuorum when its last attempt
// failed that way. The error carries a *NodeError for each failed node;
// find them with errors.As.
var ErrQuorum = errs.ErrQuorum

// NodeError is one Redlock node's failure within an operation: the node could
// not be reached, did not answer within the node timeout (Err then matches
// os.ErrDeadlineExceeded), or answered with an error (a foreign key matches
// ErrKeyConflict). Redlock's errors join one per failed node.
type NodeError = errs.NodeError
