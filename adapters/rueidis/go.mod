module github.com/dlock-go/dlock/adapters/rueidis

go 1.23.0

require (
	github.com/dlock-go/dlock v0.0.0-20261128164520-cf6e667c9dac
	github.com/redis/rueidis v1.0.69
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/redis/go-redis/v9 v9.17.3 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.31.0 // indirect
)

replace github.com/dlock-go/dlock => ../..
