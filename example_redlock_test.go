package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// redlockNodes returns clients for three independent Redis masters; in these
// examples, redis-servers started for the test run. The caller closes them.
func redlockNodes() []*redis.Client {
	var clients []*redis.Client
	for _, addr := range redistest.SharedNodeAddrs(3) {
		clients = append(clients, redis.NewClient(&redis.Options{
			Addr: addr,
			// A request to a node that stops answering then ends at the
			// node timeout instead of go-redis's read timeout.
			ContextTimeoutEnabled: true,
		}))
	}
	return clients
}

// Take a lock over three independent Redis masters: it keeps working while
// any two of them are up.
func ExampleNewRedlock() {
	var nodes []dlock.RedisClient
	for _, rdb := range redlockNodes() {
		defer rdb.Close()
		nodes = append(nodes, rdb)
	}
	rl, err := dlock.NewRedlock(nodes, dlock.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	defer rl.Close()
	ctx := context.Background()

	lease, err := rl.Mutex("example:billing-run").Lock(ctx)
	if err != nil {
		// errors.Is(err, dlock.ErrQuorum) when too few nodes answered; each
		// failed node is a *dlock.NodeError within err.
		panic(err)
	}
	// Redlock has no fencing token: independent nodes cannot order grants.
	fmt.Println("held, token:", lease.Token())

	_, err = rl.Mutex("example:billing-run").TryLock(ctx)
	fmt.Println("held by someone else:", errors.Is(err, dlock.ErrNotObtained))

	fmt.Println("unlock:", lease.Unlock(ctx))
	// Output:
	// held, token: 0
	// held by someone else: true
	// unlock: <nil>
}

// Run a function under a Redlock lock; ctx is cancelled if the lock is lost.
func ExampleRedlock_Do() {
	var nodes []dlock.RedisClient
	for _, rdb := range redlockNodes() {
		defer rdb.Close()
		nodes = append(nodes, rdb)
	}
	rl, err := dlock.NewRedlock(nodes)
	if err != nil {
		panic(err)
	}
	defer rl.Close()

	err = rl.Do(context.Background(), "example:rotate-keys", func(ctx context.Context) error {
		fmt.Println("rotating")
		return nil
	})
	fmt.Println("done, error:", err)
	// Output:
	// rotating
	// done, error: <nil>
}
