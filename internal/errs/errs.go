// Package errs holds dlock's error values and the helpers that build and
// classify them. The root package re-exports the sentinels under their
// public names (ErrNotHeld is errs.ErrNotHeld), so errors.Is works across the
// layers; their contracts are documented there.
package errs

import (
	"errors"
	"fmt"
	"strings"
)

// The sentinels, documented in the root package as Err<Name>.
var (
	ErrNotObtained     = errors.New("dlock: not obtained")
	ErrNotHeld         = errors.New("dlock: not held")
	ErrLockLost        = errors.New("dlock: lock lost")
	ErrInvalidArgument = errors.New("dlock: invalid argument")
	ErrKeyConflict     = errors.New("dlock: key conflict")
	ErrClosed          = errors.New("dlock: client closed")
	ErrLatchExpired    = errors.New("dlock: latch expired before reaching zero")
	ErrReplicaAck      = errors.New("dlock: the lock's write reached fewer replicas than required")
	ErrQuorum          = errors.New("dlock: not enough Redis nodes answered")
)

// InvalidArgf returns an error matching ErrInvalidArgument with a message that
// says what was wrong and what is accepted.
func InvalidArgf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// Errorf is fmt.Errorf for errors that wrap others of dlock's: every dlock
// error starts with "dlock: ", so a wrapped one would repeat it
// mid-message ("dlock: Unlock "x": dlock: not held"). The text keeps the
// first; errors.Is and errors.As see the same chain.
func Errorf(format string, args ...any) error {
	return prefixed{fmt.Errorf(format, args...)}
}

// prefixed prints its error with the package prefix once.
type prefixed struct{ err error }

func (e prefixed) Error() string { return strings.ReplaceAll(e.err.Error(), ": dlock: ", ": ") }

func (e prefixed) Unwrap() error { return e.err }

// Closedf is ErrClosed for op on the lock called name.
func Closedf(op, name string) error {
	return Errorf("dlock: %s %q: %w", op, name, ErrClosed)
}

// Unexpected is the error for a script reply of a shape no script of this
// version sends.
func Unexpected(reply any) error {
	return Errorf("dlock: unexpected reply from a script: %#v (is another version of dlock using the same keys?)", reply)
}

// Join is errors.Join that returns a lone error unchanged, keeping its
// message free of Join's line breaks.
func Join(errs ...error) error {
	var kept []error
	for _, err := range errs {
		if err != nil {
			kept = append(kept, err)
		}
	}
	switch len(kept) {
	case 0:
		return nil
	case 1:
		return kept[0]
	}
	return errors.Join(kept...)
}

// NodeError is one Redlock node's failure within an operation; the root
// package exports it as dlock.NodeError, with its contract.
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
