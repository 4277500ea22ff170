package dlockotel

import (
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Option configures New.
type Option func(*config)

// config holds New's settings; defaultConfig lists the defaults.
type config struct {
	meterProvider  metric.MeterProvider
	tracerProvider trace.TracerProvider
	attrs          []attribute.KeyValue
	nameInMetrics  bool
	errs           []error
}

func defaultConfig() config {
	return config{
		meterProvider:  otel.GetMeterProvider(),
		tracerProvider: otel.GetTracerProvider(),
		attrs:          nil,
		nameInMetrics:  false,
	}
}

func (c *config) fail(err error) { c.errs = append(c.errs, err) }

// WithMeterProvider sets where the instruments are created; pass
// go.opentelemetry.io/otel/metric/noop's MeterProvider to record no
// metrics. Default: the global provider, otel.GetMeterProvider(), as it is
// when New is called (the global one forwards to a provider set later).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp == nil {
			c.fail(errors.New("dlockotel: WithMeterProvider(nil)"))
			return
		}
		c.meterProvider = mp
	}
}

// WithTracerProvider sets where spans are started; pass
// go.opentelemetry.io/otel/trace/noop's TracerProvider to record no spans.
// Default: the global provider, otel.GetTracerProvider(), as it is when New
// is called (the global one forwards to a provider set later).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp == nil {
			c.fail(errors.New("dlockotel: WithTracerProvider(nil)"))
			return
		}
		c.tracerProvider = tp
	}
}

// WithAttributes adds attrs to every measurement and every span, e.g. the
// Redis deployment a Client locks on when a process has several. They must
// be few and of few values: each combination is a time series of its own.
// Default: none.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *config) {
		c.attrs = append(c.attrs, attrs...)
	}
}

// WithLockNameInMetrics adds the lock's name (attribute dlock.lock.name) to
// every measurement. Spans always carry it; metrics do not by default,
// because every distinct name becomes a time series of its own in every
// instrument: turn it on only when a process uses a small, fixed set of
// names, never for names built from ids ("orders:1001"). Default: false.
func WithLockNameInMetrics(on bool) Option {
	return func(c *config) { c.nameInMetrics = on }
}
