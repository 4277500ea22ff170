// Package dlockotel records dlock's locks as OpenTelemetry metrics and
// traces: how long acquisitions take and how they end, how many attempts
// they make, how fast a released lock reaches the next waiter, how long
// locks are held, and their renewals and losses.
//
//	obs, err := dlockotel.New() // the global MeterProvider and TracerProvider
//	if err != nil {
//		return err
//	}
//	c, err := dlock.New(rdb, dlock.WithObserver(obs))
//
// Without an Observer, dlock measures nothing and costs nothing; this
// package is a module of its own so that dlock itself never depends on
// OpenTelemetry.
//
// # Metrics
//
// All durations are in seconds. Attributes in brackets are present only
// where they apply.
//
//	dlock.acquire.duration   histogram  s          dlock.lock.kind, dlock.operation, dlock.outcome, [error.type]
//	dlock.acquire.attempts   histogram  {attempt}  as dlock.acquire.duration
//	dlock.handoff.duration   histogram  s          dlock.lock.kind, dlock.operation
//	dlock.hold.duration      histogram  s          dlock.lock.kind, dlock.outcome, [error.type]
//	dlock.renewals           counter    {renewal}  dlock.lock.kind, dlock.outcome, [error.type]
//	dlock.losses             counter    {loss}     dlock.lock.kind
//
// dlock.outcome of an acquire is "acquired", "not_obtained" (held by
// someone else: TryLock found it taken), "timeout" (the context's deadline
// ended the call first, usually a Lock that waited its whole budget),
// "canceled" (the context was canceled) or "error" (anything else: Redis
// unreachable, ErrKeyConflict, ErrReplicaAck, a closed Client, ...).
// Of a release (dlock.hold.duration, recorded at every Unlock or Release)
// it is "released", "not_held" (the lock had expired or been taken over
// before Unlock: it was lost) or "error" (the release failed: the lease
// ends as lost, since the release may still reach Redis, which also counts
// in dlock.losses; Unlock may be called again to make sure the lock is
// released). Of a renewal it is "ok" or "failed".
// error.type names the error's class, for outcomes "error" and "failed":
// "not_held", "lock_lost", "replica_ack", "quorum", "key_conflict",
// "closed", "invalid_argument", "timeout", "canceled", or "_OTHER" (a
// Redis or network failure).
//
// The lock's name is not a metric attribute unless WithLockNameInMetrics
// says so: names are often built from ids, and each would be a time series
// of its own.
//
// # Traces
//
// Each acquire is a span of kind internal named after its method:
// "dlock.Lock", "dlock.TryLock", "dlock.RLock", "dlock.TryRLock",
// "dlock.Acquire" or "dlock.TryAcquire". It carries dlock.lock.name,
// dlock.lock.kind and dlock.operation from the start and, at the end,
// dlock.outcome, dlock.acquire.attempts, dlock.fence_token (once acquired;
// not for Redlock, whose leases have none), dlock.handoff.duration (for a
// lock handed over by a release) and error.type. The acquire's Redis
// commands run under the span's context, so spans of go-redis's own
// instrumentation (redisotel) nest under it. Its status is Error for the
// outcomes "error" and "timeout", which end a call that wanted the lock
// without it; "not_obtained" (a TryLock's normal answer) and "canceled"
// (the caller's own decision) leave it unset, as does success.
//
// Unlock and Release add an event "dlock.release" to the span in their
// context, if it records, with the lock's name, kind, fence token, the
// time held and the outcome. Renewals and losses happen on the Client's
// watchdog, outside any request: they are metrics (and log records, see
// dlock.WithLogger), not spans.
package dlockotel

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-go/dlock"
)

// ScopeName is the instrumentation scope of the meter and the tracer, for
// views and filters.
const ScopeName = "github.com/dlock-go/dlock/dlockotel"

// Attribute keys, documented in the package doc and the README.
const (
	keyName     = attribute.Key("dlock.lock.name")
	keyKind     = attribute.Key("dlock.lock.kind")
	keyOp       = attribute.Key("dlock.operation")
	keyOutcome  = attribute.Key("dlock.outcome")
	keyToken    = attribute.Key("dlock.fence_token")
	keyAttempts = attribute.Key("dlock.acquire.attempts")
	keyHandoff  = attribute.Key("dlock.handoff.duration")
	keyHeld     = attribute.Key("dlock.hold.duration")
	keyErrType  = attribute.Key("error.type")
)

// Bucket boundaries, in seconds (in attempts for attemptBuckets). The
// SDK's default boundaries (0 to 10000) suit milliseconds, not seconds.
var (
	// An uncontended acquire is one round trip (sub-millisecond on a LAN);
	// a contended one waits for holders, up to the caller's deadline.
	acquireBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
		0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	// A hand-off is one publish from the releaser's Redis to the waiter.
	handoffBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
		0.025, 0.05, 0.1, 0.25, 0.5, 1}
	// Holds range from a short critical section to a long job.
	holdBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60,
		300, 900, 3600}
	attemptBuckets = []float64{1, 2, 3, 5, 10, 20, 50, 100}
)

// Observer records what dlock reports through dlock.Observer as
// OpenTelemetry metrics and spans. Set it on a Client with
// dlock.WithObserver. It is safe for concurrent use, and one Observer may
// serve several Clients.
type Observer struct {
	tracer          trace.Tracer
	acquireDuration metric.Float64Histogram
	acquireAttempts metric.Int64Histogram
	handoffDuration metric.Float64Histogram
	holdDuration    metric.Float64Histogram
	renewals        metric.Int64Counter
	losses          metric.Int64Counter

	attrs         []attribute.KeyValue // WithAttributes
	nameInMetrics bool

	// sets caches the attribute set of each combination of low-cardinality
	// attributes (a setKey), so a measurement builds none. Without the
	// lock's name the combinations are few: kinds × operations × outcomes
	// × error types.
	sets sync.Map // setKey → metric.MeasurementOption
}

var _ dlock.Observer = (*Observer)(nil)

// New returns an Observer that records on the global MeterProvider and
// TracerProvider, or on those that WithMeterProvider and WithTracerProvider
// give. It returns an error if an option is invalid or the MeterProvider
// refuses an instrument (which OpenTelemetry's SDK does only when its views
// are misconfigured).
func New(opts ...Option) (*Observer, error) {
	cfg := defaultConfig()
	for _, opt := range opts {
		opt(&cfg)
	}
	if len(cfg.errs) > 0 {
		return nil, cfg.errs[0]
	}
	meter := cfg.meterProvider.Meter(ScopeName)
	o := &Observer{
		tracer:        cfg.tracerProvider.Tracer(ScopeName),
		attrs:         cfg.attrs,
		nameInMetrics: cfg.nameInMetrics,
	}
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	o.acquireDuration, err = meter.Float64Histogram("dlock.acquire.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Time an acquire (TryLock, Lock, RLock, Acquire, ...) took, whatever its outcome."),
		metric.WithExplicitBucketBoundaries(acquireBuckets...))
	note(err)
	o.acquireAttempts, err = meter.Int64Histogram("dlock.acquire.attempts",
		metric.WithUnit("{attempt}"),
		metric.WithDescription("Requests to Redis an acquire made before it ended."),
		metric.WithExplicitBucketBoundaries(attemptBuckets...))
	note(err)
	o.handoffDuration, err = meter.Float64Histogram("dlock.handoff.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Time from a lock's hand-over to a waiter on the Redis server to its arrival at the waiter (server and host clocks must agree)."),
		metric.WithExplicitBucketBoundaries(handoffBuckets...))
	note(err)
	o.holdDuration, err = meter.Float64Histogram("dlock.hold.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Time a lock was held, from its acquire to its Unlock or Release."),
		metric.WithExplicitBucketBoundaries(holdBuckets...))
	note(err)
	o.renewals, err = meter.Int64Counter("dlock.renewals",
		metric.WithUnit("{renewal}"),
		metric.WithDescription("Renewals of held locks by the watchdog."))
	note(err)
	o.losses, err = meter.Int64Counter("dlock.losses",
		metric.WithUnit("{loss}"),
		metric.WithDescription("Held locks lost: a renewal found the key gone or taken over, or the validity ran out without a renewal."))
	note(err)
	if len(errs) > 0 {
		return nil, fmt.Errorf("dlockotel: creating instruments: %w", errors.Join(errs...))
	}
	return o, nil
}

// AcquireStart starts the acquire's span and returns its context; the
// returned function ends the span and records the acquire's metrics. It
// implements dlock.Observer.
func (o *Observer) AcquireStart(ctx context.Context, a dlock.Acquisition) (context.Context, func(dlock.AcquireOutcome)) {
	attrs := make([]attribute.KeyValue, 0, 3+len(o.attrs))
	attrs = append(attrs, keyName.String(a.Name), keyKind.String(string(a.Kind)), keyOp.String(a.Op))
	attrs = append(attrs, o.attrs...)
	ctx, span := o.tracer.Start(ctx, spanName(a.Op),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return ctx, func(out dlock.AcquireOutcome) { o.acquireDone(ctx, span, a, out) }
}

func (o *Observer) acquireDone(ctx context.Context, span trace.Span, a dlock.Acquisition, out dlock.AcquireOutcome) {
	outcome := acquireOutcome(out.Err)
	errType := ""
	if outcome == outcomeError {
		errType = errorType(out.Err)
	}
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 5)
		attrs = append(attrs, keyOutcome.String(outcome), keyAttempts.Int(out.Attempts))
		if out.Err == nil && out.Token != 0 {
			attrs = append(attrs, keyToken.Int64(out.Token))
		}
		if out.Handoff > 0 {
			attrs = append(attrs, keyHandoff.Float64(out.Handoff.Seconds()))
		}
		if errType != "" {
			attrs = append(attrs, keyErrType.String(errType))
		}
		span.SetAttributes(attrs...)
		switch outcome {
		case outcomeError:
			span.RecordError(out.Err)
			span.SetStatus(codes.Error, out.Err.Error())
		case outcomeTimeout:
			span.SetStatus(codes.Error, out.Err.Error())
		}
	}
	span.End()

	set := o.measurement(setKey{kind: a.Kind, op: a.Op, outcome: outcome, errType: errType}, a.Name)
	o.acquireDuration.Record(ctx, out.Waited.Seconds(), set)
	o.acquireAttempts.Record(ctx, int64(out.Attempts), set)
	if out.Err == nil && out.Handoff > 0 {
		o.handoffDuration.Record(ctx, out.Handoff.Seconds(),
			o.measurement(setKey{kind: a.Kind, op: a.Op}, a.Name))
	}
}

// Renewed counts a renewal. It implements dlock.Observer.
func (o *Observer) Renewed(l dlock.LeaseInfo, err error) {
	k := setKey{kind: l.Kind, outcome: "ok"}
	if err != nil {
		k.outcome, k.errType = "failed", errorType(err)
	}
	o.renewals.Add(context.Background(), 1, o.measurement(k, l.Name))
}

// Lost counts a loss. It implements dlock.Observer.
func (o *Observer) Lost(l dlock.LeaseInfo, err error) {
	o.losses.Add(context.Background(), 1, o.measurement(setKey{kind: l.Kind}, l.Name))
}

// Released records how long the lock was held, and adds an event
// "dlock.release" to the span in ctx if it records. It implements
// dlock.Observer.
func (o *Observer) Released(ctx context.Context, l dlock.LeaseInfo, err error) {
	k := setKey{kind: l.Kind, outcome: "released"}
	switch {
	case err == nil:
	case errors.Is(err, dlock.ErrNotHeld):
		k.outcome = "not_held"
	default:
		k.outcome, k.errType = outcomeError, errorType(err)
	}
	o.holdDuration.Record(ctx, l.Held.Seconds(), o.measurement(k, l.Name))
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 6)
		attrs = append(attrs, keyName.String(l.Name), keyKind.String(string(l.Kind)),
			keyHeld.Float64(l.Held.Seconds()), keyOutcome.String(k.outcome))
		if l.Token != 0 {
			attrs = append(attrs, keyToken.Int64(l.Token))
		}
		if k.errType != "" {
			attrs = append(attrs, keyErrType.String(k.errType))
		}
		span.AddEvent("dlock.release", trace.WithAttributes(attrs...))
	}
}
