package errs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// OthersFirst ends a NotObtainedError's QueuedAhead when arrival order
// turned the acquire away.
const OthersFirst = "others waiting for it came first and are served first (arrival order)"

// ErrNoAnswer is a wait's last failure when its context ended before Redis
// answered any of its attempts: the lock was never seen held, so the wait
// did not end in contention (a server too slow, or unreachable, for the
// deadline).
var ErrNoAnswer = errors.New("no reply from Redis before the wait ended")

// NotObtainedError is returned when an acquire ends without the lock. It
// matches ErrNotObtained and, through Unwrap, the context's error and the last
// error Redis returned while waiting.
type NotObtainedError struct {
	Name      string
	HolderTTL time.Duration // the holder's remaining time when last seen; 0 unknown
	Waited    time.Duration // 0 for TryLock
	CtxErr    error         // why the wait ended, if it was the context
	Cause     error         // context.Cause, when it differs from CtxErr
	Last      error         // the last transient failure seen while waiting
	// QueuedAhead says why the lock was not obtained although it was free
	// enough: others waiting first come first (OthersFirst). "" when it
	// was not.
	QueuedAhead string
}

func (e *NotObtainedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "dlock: %q not obtained", e.Name)
	if e.Waited > 0 {
		fmt.Fprintf(&b, " after waiting %v", e.Waited.Round(time.Millisecond))
	}
	if e.CtxErr != nil {
		fmt.Fprintf(&b, ": %v", e.CtxErr)
		if e.Cause != nil {
			fmt.Fprintf(&b, " (%v)", e.Cause)
		}
	}
	switch {
	case e.QueuedAhead != "":
		b.WriteString(": " + e.QueuedAhead)
	case e.HolderTTL > 0:
		fmt.Fprintf(&b, ": held by another owner for %v more", e.HolderTTL.Round(time.Millisecond))
	}
	if e.Last != nil {
		fmt.Fprintf(&b, "; last error: %v", e.Last)
	}
	return b.String()
}

// Is matches ErrNotObtained.
func (e *NotObtainedError) Is(target error) bool { return target == ErrNotObtained }

// Unwrap lists the context's error, its cause and the last failure.
func (e *NotObtainedError) Unwrap() []error {
	var errs []error
	for _, err := range []error{e.CtxErr, e.Cause, e.Last} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// WaitEnded builds the error for a wait that ctx (or Close) ended.
func WaitEnded(ctx context.Context, name string, began time.Time, holderTTL time.Duration, last error) error {
	e := &NotObtainedError{Name: name, Waited: time.Since(began), HolderTTL: holderTTL, Last: last, CtxErr: ctx.Err()}
	if cause := context.Cause(ctx); cause != nil && cause != e.CtxErr {
		e.Cause = cause
	}
	return e
}

// TryEnded is the error of a one-attempt call (TryLock) whose ctx was done
// before its reply: the context's error, not ErrNotObtained, which from such a
// call says that somebody holds the lock.
func TryEnded(ctx context.Context, op, name string) error {
	return Errorf("dlock: %s %q: %w", op, name, ctx.Err())
}
