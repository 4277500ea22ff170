module github.com/dlock-go/dlock/adapters/gocron

go 1.23.0

replace github.com/dlock-go/dlock => ../..

require (
	github.com/dlock-go/dlock v0.0.0-20261128164520-cf6e667c9dac
	github.com/go-co-op/gocron/v2 v2.21.2
	github.com/redis/go-redis/v9 v9.17.3
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jonboulle/clockwork v0.5.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	go.uber.org/goleak v1.3.0 // indirect
)
