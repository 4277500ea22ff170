package dlockotel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestOptions adds the lock name and a fixed attribute to the metrics.
func TestOptions(t *testing.T) {
	srv := redistest.Shared(t)
	tm := newTelemetry(t, dlockotel.WithLockNameInMetrics(true),
		dlockotel.WithAttributes(attribute.String("deployment", "eu-1")))
	c := tm.client(t, srv)
	ctx := testCtx(t)
	name := t.Name()

	l, err := c.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	m := tm.collect(t)
	m.point(t, "dlock.acquire.duration", "deployment=eu-1", "dlock.lock.kind=mutex", "dlock.lock.name="+name,
		"dlock.operation=TryLock", "dlock.outcome=acquired")
	m.point(t, "dlock.hold.duration", "deployment=eu-1", "dlock.lock.kind=mutex", "dlock.lock.name="+name,
		"dlock.outcome=released")
	if a := spanAttrs(tm.onlySpan(t, "dlock.TryLock")); a["deployment"].AsString() != "eu-1" {
		t.Errorf("span attributes %v lack deployment=eu-1", a)
	}

	for _, opt := range []dlockotel.Option{dlockotel.WithMeterProvider(nil), dlockotel.WithTracerProvider(nil)} {
		if _, err := dlockotel.New(opt); err == nil {
			t.Errorf("New with a nil provider: no error")
		}
	}
}

// TestOffByDefault installs global providers: a Client without the
// Observer records nothing in them, and New without options records there.
func TestOffByDefault(t *testing.T) {
	srv := redistest.Shared(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	otel.SetMeterProvider(mp)
	otel.SetTracerProvider(tp)
	ctx := testCtx(t)
	name := t.Name()
	metricsRecorded := func() int {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, sm := range rm.ScopeMetrics {
			n += len(sm.Metrics)
		}
		return n
	}

	plain := newClient(t, srv.Client(t))
	l, err := plain.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, m := len(spans.Ended()), metricsRecorded(); n != 0 || m != 0 {
		t.Fatalf("without an Observer: %d spans and %d instruments recorded, want none", n, m)
	}

	obs, err := dlockotel.New()
	if err != nil {
		t.Fatal(err)
	}
	observed := newClient(t, srv.Client(t), dlock.WithObserver(obs))
	if l, err = observed.Mutex(name).TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, m := len(spans.Ended()), metricsRecorded(); n != 1 || m != 3 {
		t.Errorf("New() with the global providers: %d spans and %d instruments recorded, want 1 and 3", n, m)
	}
}
