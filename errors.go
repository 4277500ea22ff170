package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
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
	ErrNotObtained = errors.New("dlock: not obtained")

	// ErrNotHeld means the lease no longer owns its key: the key expired,
	// was released or force-released, or belongs to another owner now.
	ErrNotHeld = errors.New("dlock: not held")

	// ErrLockLost means a lease was lost while held: a renewal found the key
	// gone or taken over, or the local validity deadline passed without a
	// successful renewal (Redis unreachable). Lease.Err and Client.Do wrap it
	// with the reason.
	ErrLockLost = errors.New("dlock: lock lost")

	// ErrInvalidArgument means a name, option or argument was rejected as
	// invalid, before anything was sent to Redis; the exceptions are a
	// Semaphore request for more permits than the limit stored in Redis, and
	// a Semaphore.AddPermits that would take that limit out of range, which
	// only the server can tell (see Semaphore.TryAcquire and AddPermits).
	ErrInvalidArgument = errors.New("dlock: invalid argument")

	// ErrKeyConflict means a lock's key, or a key beside it (its queue,
	// waiters or fencing key), holds something dlock did not write: a value
	// of another type (a list, a hash, ...) or a string without an expiry.
	// dlock never modifies such a key; choose another name or key prefix,
	// or delete the key if it is stale. An acquire that returns it has taken
	// and queued nothing. Unlock returns it after releasing the lock when
	// the foreign key is one beside the lock key (the message says "the lock
	// was released, but ..."): the lock is free, and the lease has ended.
	ErrKeyConflict = errors.New("dlock: key conflict")

	// ErrClosed means the Client was closed.
	ErrClosed = errors.New("dlock: client closed")

	// ErrLatchExpired means a Latch that Wait saw counting down expired
	// before it reached zero: its TTL passed without a TrySetCount or
	// CountDown (a coordinator that stopped counting?). The events it
	// counted did not all happen, as far as the latch knows.
	ErrLatchExpired = errors.New("dlock: latch expired before reaching zero")

	// ErrReplicaAck means a lock's write reached fewer replicas than
	// WithReplicaAck requires within its timeout. An acquire that gets it
	// has released the lock again; a renewal that gets it did not extend
	// the lease. The error says how many replicas acknowledged.
	ErrReplicaAck = errors.New("dlock: the lock's write reached fewer replicas than required")
)

// invalidArgf returns an ErrInvalidArgument with a message saying what was
// wrong and what is accepted.
func invalidArgf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// othersFirst ends a notObtainedError's queuedAhead when arrival order
// turned the acquire away.
const othersFirst = "others waiting for it came first and are served first (arrival order)"

// notObtainedError is returned when an acquire ends without the lock. It
// matches ErrNotObtained and, through Unwrap, the context's error and the
// last error Redis returned while waiting.
type notObtainedError struct {
	name      string
	holderTTL time.Duration // the holder's remaining time when last seen; 0 unknown
	waited    time.Duration // 0 for TryLock
	ctxErr    error         // why the wait ended, if it was the context
	cause     error         // context.Cause, when it differs from ctxErr
	last      error         // the last transient failure seen while waiting
	// queuedAhead says why the lock was not obtained although it was free
	// enough: others waiting first come first (othersFirst). "" when it was
	// not.
	queuedAhead string
}

func (e *notObtainedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dlock: %q not obtained", e.name)
	if e.waited > 0 {
		fmt.Fprintf(&b, " after waiting %v", e.waited.Round(time.Millisecond))
	}
	if e.ctxErr != nil {
		fmt.Fprintf(&b, ": %v", e.ctxErr)
		if e.cause != nil {
			fmt.Fprintf(&b, " (%v)", e.cause)
		}
	}
	switch {
	case e.queuedAhead != "":
		b.WriteString(": " + e.queuedAhead)
	case e.holderTTL > 0:
		fmt.Fprintf(&b, ": held by another owner for %v more", e.holderTTL.Round(time.Millisecond))
	}
	if e.last != nil {
		fmt.Fprintf(&b, "; last error: %v", e.last)
	}
	return b.String()
}

func (e *notObtainedError) Is(target error) bool { return target == ErrNotObtained }

func (e *notObtainedError) Unwrap() []error {
	var errs []error
	for _, err := range []error{e.ctxErr, e.cause, e.last} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// errNoAnswer is a wait's last failure when its context ended before Redis
// answered any of its attempts: the lock was never seen held, so the wait
// did not end in contention (a server too slow, or unreachable, for the
// deadline).
var errNoAnswer = errors.New("no reply from Redis before the wait ended")

// waitEnded builds the error for a wait that ctx (or Close) ended.
func waitEnded(ctx context.Context, name string, began time.Time, holderTTL time.Duration, last error) error {
	e := &notObtainedError{name: name, waited: time.Since(began), holderTTL: holderTTL, last: last, ctxErr: ctx.Err()}
	if cause := context.Cause(ctx); cause != nil && cause != e.ctxErr {
		e.cause = cause
	}
	return e
}

// tryEnded is the error of a one-attempt call (TryLock) whose ctx was done
// before its reply: the context's error, not ErrNotObtained, which from such
// a call says that somebody holds the lock.
func tryEnded(ctx context.Context, op, name string) error {
	return errorf("dlock: %s %q: %w", op, name, ctx.Err())
}

// redisError wraps a failed call to Redis for operation op on name, turning
// replies that show a foreign key into ErrKeyConflict.
func redisError(op, name string, err error) error {
	var rerr *driver.ReplyError
	if errors.As(err, &rerr) && isConflictReply(rerr.Msg) {
		detail, whose := conflictDetail(rerr.Msg), "dlock did not write this key and leaves it untouched"
		if strings.Contains(detail, "dlock did not write") || strings.Contains(detail, "no lock wrote") {
			whose = "dlock leaves it untouched" // the detail said whose it is not
		}
		return errorf("dlock: %s %q: %w: %s (%s: use another name or key prefix, or delete the key if it is stale)",
			op, name, ErrKeyConflict, detail, whose)
	}
	if rerr != nil {
		if hint := replyHint(rerr.Msg); hint != "" {
			return errorf("dlock: %s %q: %w (%s)", op, name, err, hint)
		}
	}
	return errorf("dlock: %s %q: %w", op, name, err)
}

// replyHint says what to do about the refusals that come from how the
// server is set up rather than from the lock: retrying changes nothing.
// The codes are searched anywhere: Redis 6 prefixes errors raised inside a
// script with "ERR Error running script". An ACL refusal of a command a
// script runs carries no NOPERM at all: Redis 6 and 7.0 word it "The user
// executing the script can't ...", 7.2 on "ACL failure in script".
func replyHint(msg string) string {
	switch {
	case strings.Contains(msg, "OOM command not allowed"):
		return "Redis is at its maxmemory and evicts nothing: free memory or raise maxmemory; " +
			"held locks can still be renewed and released (README: Redis configuration)"
	case strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, ": NOPERM "),
		strings.Contains(msg, "The user executing the script can't"),
		strings.Contains(msg, "ACL failure in script"):
		return "the Redis user lacks a permission dlock needs: " +
			"see the ACL rules in the README's Redis configuration section"
	}
	return ""
}

// isConflictReply recognises a foreign key in an error reply. Servers wrap
// errors raised inside scripts differently (Redis prefixes "ERR
// user_script:1:", miniredis "ERR Error compiling script"), so the markers
// are searched anywhere in the message.
func isConflictReply(msg string) bool {
	return strings.Contains(msg, "WRONGTYPE") || strings.Contains(msg, "DLOCK_CONFLICT")
}

// conflictDetail keeps what follows our marker (or the WRONGTYPE message),
// without the server's script location suffix.
func conflictDetail(msg string) string {
	if i := strings.Index(msg, "DLOCK_CONFLICT "); i >= 0 {
		msg = msg[i+len("DLOCK_CONFLICT "):]
	} else if i := strings.Index(msg, "WRONGTYPE"); i >= 0 {
		msg = msg[i:]
	}
	if i := strings.Index(msg, " script: "); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

// isTransient reports whether err is worth retrying while a Lock waits:
// connection failures and the replies a server gives while it loads data,
// fails over or reshards. Other error replies are permanent, and so is a
// closed Redis client.
func isTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrReplicaAck) ||
		errors.Is(err, driver.ErrClientClosed) {
		return false
	}
	var rerr *driver.ReplyError
	if errors.As(err, &rerr) {
		for _, prefix := range []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "MOVED", "ASK", "NOREPLICAS"} {
			if strings.HasPrefix(rerr.Msg, prefix) {
				return true
			}
		}
		return false
	}
	return true
}

// errorf is fmt.Errorf for dlock's errors that wrap others of dlock's:
// every error of this package starts with "dlock: ", so a wrapped one would
// repeat it mid-message ("dlock: Unlock "x": dlock: not held"). The text
// keeps the first; errors.Is and errors.As see the same chain.
func errorf(format string, args ...any) error {
	return prefixedError{fmt.Errorf(format, args...)}
}

// prefixedError prints its error with the package prefix once.
type prefixedError struct{ err error }

func (e prefixedError) Error() string {
	return strings.ReplaceAll(e.err.Error(), ": dlock: ", ": ")
}

func (e prefixedError) Unwrap() error { return e.err }

// releasedDespiteConflict reports whether err is a release script's "the
// lock was released, but ..." conflict (mutex_release.lua,
// reentrant_release.lua): the lock is gone, deleted by that release, and a
// key beside it holds something dlock did not write.
func releasedDespiteConflict(err error) bool {
	var rerr *driver.ReplyError
	return errors.As(err, &rerr) && strings.Contains(rerr.Msg, "DLOCK_CONFLICT the lock was released, but ")
}

// isConflictError reports whether err is (or wraps) an error reply that
// shows a foreign key.
func isConflictError(err error) bool {
	var rerr *driver.ReplyError
	return errors.As(err, &rerr) && isConflictReply(rerr.Msg)
}

// isReplyError reports whether err is (or wraps) the server's error reply,
// as opposed to a transport failure.
func isReplyError(err error) bool {
	var rerr *driver.ReplyError
	return errors.As(err, &rerr)
}

// ErrQuorum means a Redlock operation could not reach enough nodes: fewer
// than a quorum (N/2+1) answered in time and without an error, so whether the
// lock is free or held could not be decided. Returned by TryLock, Extend,
// Unlock or the like, or by a Lock that gives up at once, it never matches
// ErrNotObtained (someone else holds the lock). A RedlockMutex.Lock that
// its context ends returns an error matching ErrNotObtained and the
// context's error, which also matches ErrQuorum when its last attempt
// failed that way. The error carries a *NodeError for each failed node;
// find them with errors.As.
var ErrQuorum = errors.New("dlock: not enough Redis nodes answered")

// NodeError is one Redlock node's failure within an operation: the node could
// not be reached, did not answer within the node timeout (Err then matches
// os.ErrDeadlineExceeded), or answered with an error (a foreign key matches
// ErrKeyConflict). Redlock's errors join one per failed node.
type NodeError struct {
	// Addr is the node's address, as in its redis.Options.
	Addr string
	// Err is what went wrong on that node.
	Err error
}

// Error returns "node <addr>: <what went wrong>".
func (e *NodeError) Error() string { return "node " + e.Addr + ": " + e.Err.Error() }

// Unwrap returns Err.
func (e *NodeError) Unwrap() error { return e.Err }
