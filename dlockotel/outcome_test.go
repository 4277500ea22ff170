package dlockotel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/dlock-go/dlock"
)

// timeoutError is a network error that timed out, as go-redis returns when
// a read outlasts its ReadTimeout.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

var _ net.Error = timeoutError{}

func TestAcquireOutcome(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "acquired"},
		{fmt.Errorf("dlock: %q: %w", "x", dlock.ErrNotObtained), "not_obtained"},
		{errors.Join(dlock.ErrNotObtained, context.DeadlineExceeded), "timeout"},
		{errors.Join(dlock.ErrNotObtained, context.Canceled), "canceled"},
		{errors.Join(dlock.ErrNotObtained, context.Canceled, errors.New("connection refused")), "canceled"},
		{fmt.Errorf("dlock: TryLock: %w", context.DeadlineExceeded), "timeout"},
		{errors.Join(dlock.ErrClosed, dlock.ErrNotObtained), "error"},
		{fmt.Errorf("dlock: %w", dlock.ErrKeyConflict), "error"},
		{fmt.Errorf("dlock: %w", dlock.ErrReplicaAck), "error"},
		{errors.New("dial tcp: connection refused"), "error"},
	} {
		if got := acquireOutcome(tc.err); got != tc.want {
			t.Errorf("acquireOutcome(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestErrorType(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("dlock: %w", dlock.ErrNotHeld), "not_held"},
		{fmt.Errorf("dlock: %w", dlock.ErrLockLost), "lock_lost"},
		{fmt.Errorf("dlock: %w: 0 of 1", dlock.ErrReplicaAck), "replica_ack"},
		{fmt.Errorf("dlock: %w", dlock.ErrQuorum), "quorum"},
		{fmt.Errorf("dlock: %w", dlock.ErrKeyConflict), "key_conflict"},
		{errors.Join(dlock.ErrClosed, dlock.ErrNotObtained), "closed"},
		{fmt.Errorf("dlock: %w", dlock.ErrInvalidArgument), "invalid_argument"},
		{fmt.Errorf("dlock: Lock: %w", context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("dlock: Lock: %w", timeoutError{}), "timeout"},
		{context.Canceled, "canceled"},
		{errors.New("dial tcp: connection refused"), "_OTHER"},
	} {
		if got := errorType(tc.err); got != tc.want {
			t.Errorf("errorType(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
