package dlockotel_test

import (
	"context"
	"fmt"
	"log"
	"sort"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	"github.com/dlock-go/dlock/internal/redistest"
)

// Example records a Client's locks with OpenTelemetry. A service would
// set up its SDK once (exporters to its collector), install the providers
// with otel.SetMeterProvider and otel.SetTracerProvider, and call
// dlockotel.New() without options; here an in-memory reader and span
// recorder stand in, to show what is recorded.
func Example() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())

	obs, err := dlockotel.New(dlockotel.WithMeterProvider(mp), dlockotel.WithTracerProvider(tp))
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redistest.SharedAddr()}) // localhost:6379, say
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	err = c.Do(ctx, "example:nightly-report", func(ctx context.Context) error {
		return nil // the work, while holding the lock
	})
	if err != nil {
		log.Fatal(err)
	}

	for _, s := range spans.Ended() {
		fmt.Println("span", s.Name())
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	var names []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			names = append(names, m.Name+" ("+m.Unit+")")
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Println("metric", n)
	}
	// Output:
	// span dlock.Lock
	// metric dlock.acquire.attempts ({attempt})
	// metric dlock.acquire.duration (s)
	// metric dlock.hold.duration (s)
}
