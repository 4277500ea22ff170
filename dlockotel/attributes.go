package dlockotel

import (
	"context"
	"errors"
	"net"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/dlock-go/dlock"
)

// setKey is a combination of the low-cardinality attributes of a
// measurement; empty fields are left out of the set.
type setKey struct {
	kind                 dlock.Kind
	op, outcome, errType string
}

// measurement returns the attribute option for a measurement of k (and of
// the lock name, when WithLockNameInMetrics is on).
func (o *Observer) measurement(k setKey, name string) metric.MeasurementOption {
	if o.nameInMetrics {
		return metric.WithAttributeSet(o.attributeSet(k, name))
	}
	if v, ok := o.sets.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	v, _ := o.sets.LoadOrStore(k, metric.WithAttributeSet(o.attributeSet(k, "")))
	return v.(metric.MeasurementOption)
}

func (o *Observer) attributeSet(k setKey, name string) attribute.Set {
	attrs := make([]attribute.KeyValue, 0, 5+len(o.attrs))
	attrs = append(attrs, keyKind.String(string(k.kind)))
	if k.op != "" {
		attrs = append(attrs, keyOp.String(k.op))
	}
	if k.outcome != "" {
		attrs = append(attrs, keyOutcome.String(k.outcome))
	}
	if k.errType != "" {
		attrs = append(attrs, keyErrType.String(k.errType))
	}
	if name != "" {
		attrs = append(attrs, keyName.String(name))
	}
	attrs = append(attrs, o.attrs...)
	return attribute.NewSet(attrs...)
}

// acquireOutcome classifies how an acquire ended.
func acquireOutcome(err error) string {
	switch {
	case err == nil:
		return outcomeAcquired
	case errors.Is(err, dlock.ErrClosed):
		// A wait cut short by Close matches ErrNotObtained too.
		return outcomeError
	case errors.Is(err, context.DeadlineExceeded):
		return outcomeTimeout
	case errors.Is(err, context.Canceled):
		return outcomeCanceled
	case errors.Is(err, dlock.ErrNotObtained):
		return outcomeNotObtained
	}
	return outcomeError
}

// errorType classifies a failure for the error.type attribute: one of
// dlock's sentinels, the context's end, or "_OTHER" (a Redis or network
// failure), so that the values stay few.
func errorType(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, dlock.ErrNotHeld):
		return "not_held"
	case errors.Is(err, dlock.ErrLockLost):
		return "lock_lost"
	case errors.Is(err, dlock.ErrReplicaAck):
		return "replica_ack"
	case errors.Is(err, dlock.ErrQuorum):
		return "quorum"
	case errors.Is(err, dlock.ErrKeyConflict):
		return "key_conflict"
	case errors.Is(err, dlock.ErrClosed):
		return "closed"
	case errors.Is(err, dlock.ErrInvalidArgument):
		return "invalid_argument"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "_OTHER"
}

// spanName names the span of an acquire by its method.
func spanName(op string) string {
	switch op {
	case "Lock":
		return "dlock.Lock"
	case "TryLock":
		return "dlock.TryLock"
	case "RLock":
		return "dlock.RLock"
	case "TryRLock":
		return "dlock.TryRLock"
	case "Acquire":
		return "dlock.Acquire"
	case "TryAcquire":
		return "dlock.TryAcquire"
	}
	return "dlock." + op
}

// The outcomes of an acquire.
const (
	outcomeAcquired    = "acquired"
	outcomeNotObtained = "not_obtained"
	outcomeTimeout     = "timeout"
	outcomeCanceled    = "canceled"
	outcomeError       = "error"
)
