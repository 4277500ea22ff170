module github.com/dlock-go/dlock/dlockotel

go 1.23.0

replace github.com/dlock-go/dlock => ../

require (
	github.com/dlock-go/dlock v0.0.0-20261128164520-cf6e667c9dac
	github.com/redis/go-redis/v9 v9.17.3
	go.opentelemetry.io/otel v1.38.0
	go.opentelemetry.io/otel/metric v1.38.0
	go.opentelemetry.io/otel/sdk v1.38.0
	go.opentelemetry.io/otel/sdk/metric v1.38.0
	go.opentelemetry.io/otel/trace v1.38.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.opentelemetry.io/auto/sdk v1.1.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.35.0 // indirect
)
