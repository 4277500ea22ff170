package dlockotel_test

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// telemetry is an in-memory OpenTelemetry SDK: a manual metric reader and
// a span recorder, with an Observer recording to them.
type telemetry struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tracer trace.Tracer // for the tests' own parent spans
	obs    *dlockotel.Observer
}

func newTelemetry(t testing.TB, opts ...dlockotel.Option) *telemetry {
	t.Helper()
	tm := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(tm.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tm.spans))
	tm.tracer = tp.Tracer("test")
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	obs, err := dlockotel.New(append([]dlockotel.Option{
		dlockotel.WithMeterProvider(mp), dlockotel.WithTracerProvider(tp)}, opts...)...)
	if err != nil {
		t.Fatalf("dlockotel.New: %v", err)
	}
	tm.obs = obs
	return tm
}

// client returns a dlock Client on srv that reports to tm, closed when the
// test ends.
func (tm *telemetry) client(t testing.TB, srv *redistest.Server, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	return newClient(t, srv.Client(t), append([]dlock.Option{dlock.WithObserver(tm.obs)}, opts...)...)
}

func newClient(t testing.TB, rdb redis.UniversalClient, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatalf("dlock.New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// point is one data point of an instrument: a histogram's count and sum,
// or a counter's value (in sum, with count 1).
type point struct {
	attrs attribute.Set
	count uint64
	sum   float64
}

// collected is one collection: the data points of each instrument, and
// each instrument's unit.
type collected struct {
	points map[string][]point
	units  map[string]string
}

func (tm *telemetry) collect(t testing.TB) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tm.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	got := collected{points: map[string][]point{}, units: map[string]string{}}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != dlockotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, dlockotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			got.units[m.Name] = m.Unit
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					got.points[m.Name] = append(got.points[m.Name], point{p.Attributes, p.Count, p.Sum})
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					got.points[m.Name] = append(got.points[m.Name], point{p.Attributes, p.Count, float64(p.Sum)})
				}
			case metricdata.Sum[int64]:
				if !d.IsMonotonic {
					t.Errorf("%s: not monotonic", m.Name)
				}
				for _, p := range d.DataPoints {
					got.points[m.Name] = append(got.points[m.Name], point{p.Attributes, 1, float64(p.Value)})
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return got
}

// point returns the data point of instrument name whose attributes are
// exactly want (given as "key=value" pairs), or fails the test.
func (c collected) point(t testing.TB, name string, want ...string) point {
	t.Helper()
	if p, ok := c.find(name, want...); ok {
		return p
	}
	t.Fatalf("%s: no data point with attributes %v; have %s", name, want, c.describe(name))
	return point{}
}

func (c collected) find(name string, want ...string) (point, bool) {
	sort.Strings(want)
	for _, p := range c.points[name] {
		if strings.Join(attrStrings(p.attrs), " ") == strings.Join(want, " ") {
			return p, true
		}
	}
	return point{}, false
}

func (c collected) describe(name string) string {
	var b strings.Builder
	for _, p := range c.points[name] {
		fmt.Fprintf(&b, "\n\t%v count=%d sum=%v", attrStrings(p.attrs), p.count, p.sum)
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

func attrStrings(s attribute.Set) []string {
	var out []string
	for _, kv := range s.ToSlice() {
		out = append(out, string(kv.Key)+"="+kv.Value.Emit())
	}
	sort.Strings(out)
	return out
}

// ended returns the spans ended so far, named name.
func (tm *telemetry) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tm.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// onlySpan returns the one ended span named name, or fails the test.
func (tm *telemetry) onlySpan(t testing.TB, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := tm.ended(name)
	if len(spans) != 1 {
		var names []string
		for _, s := range tm.spans.Ended() {
			names = append(names, s.Name())
		}
		t.Fatalf("%d spans named %q, want 1; ended: %v", len(spans), name, names)
	}
	return spans[0]
}

// spanAttrs returns a span's attributes by key.
func spanAttrs(s sdktrace.ReadOnlySpan) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

// testCtx returns a context that ends well after anything a test needs.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds, failing the test after limit.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitQueued waits until name's queue holds a waiter whose Client listens
// for grants, so that a release hands the lock over by pub/sub.
func waitQueued(t testing.TB, ctx context.Context, admin *redis.Client, name string) {
	t.Helper()
	key := "dlock:{" + name + "}"
	waitFor(t, 10*time.Second, "a queued, subscribed waiter", func() bool {
		return admin.ZCard(ctx, key+":q").Val() > 0 && admin.PubSubNumSub(ctx, key).Val()[key] > 0
	})
}

// spanHook is a go-redis hook that notes the span each command ran under.
type spanHook struct {
	mu    sync.Mutex
	spans []trace.SpanID
}

func (h *spanHook) note(ctx context.Context) {
	h.mu.Lock()
	h.spans = append(h.spans, trace.SpanContextFromContext(ctx).SpanID())
	h.mu.Unlock()
}

func (h *spanHook) seen() []trace.SpanID {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]trace.SpanID(nil), h.spans...)
}

func (h *spanHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *spanHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.note(ctx)
		return next(ctx, cmd)
	}
}

func (h *spanHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.note(ctx)
		return next(ctx, cmds)
	}
}
