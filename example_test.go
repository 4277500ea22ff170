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

// redisAddr is the address of your Redis server; in these examples, a
// redis-server started for the test run.
func redisAddr() string { return redistest.SharedAddr() }

// Run a function while holding a lock: the most common use.
func ExampleClient_Do() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx := context.Background()
	err = c.Do(ctx, "example:nightly-report", func(ctx context.Context) error {
		// Only one replica of the service runs this at a time. ctx is
		// cancelled, with cause dlock.ErrLockLost, if the lock is lost.
		fmt.Println("generating the report")
		return nil
	})
	fmt.Println("done, error:", err)
	// Output:
	// generating the report
	// done, error: <nil>
}

// Take a lock without waiting, and tell "someone else has it" apart from
// failures.
func ExampleMutex_TryLock() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	c, _ := dlock.New(rdb)
	defer c.Close()
	ctx := context.Background()

	first, err := c.Mutex("example:migration").TryLock(ctx)
	if err != nil {
		panic(err)
	}
	defer first.Unlock(ctx)

	_, err = c.Mutex("example:migration").TryLock(ctx)
	switch {
	case errors.Is(err, dlock.ErrNotObtained):
		fmt.Println("another instance is migrating")
	case err != nil:
		fmt.Println("cannot reach Redis:", err)
	}
	// Output:
	// another instance is migrating
}

// Wait for a lock with a deadline, and pass the fencing token to the
// protected resource.
func ExampleMutex_Lock() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	c, _ := dlock.New(rdb, dlock.WithTTL(10*time.Second))
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := c.Mutex("example:inventory:sku-42").Lock(ctx)
	if err != nil {
		// errors.Is(err, dlock.ErrNotObtained) && errors.Is(err,
		// context.DeadlineExceeded) when the wait timed out.
		panic(err)
	}
	defer lease.Unlock(ctx) // releases even if ctx is cancelled by then

	// The resource must refuse writes with a token lower than the highest
	// it has seen, e.g. UPDATE ... WHERE fence <= $token.
	fmt.Println("token is positive:", lease.Token() > 0)
	// Output:
	// token is positive: true
}

// Watch a lease for loss while working.
func ExampleLease_Done() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	c, _ := dlock.New(rdb, dlock.WithTTL(time.Second))
	defer c.Close()
	ctx := context.Background()

	lease, err := c.Mutex("example:watch").Lock(ctx)
	if err != nil {
		panic(err)
	}
	rdb.Del(ctx, "dlock:{example:watch}") // an operator deletes the key

	select {
	case <-lease.Done():
		fmt.Println("lost:", errors.Is(lease.Err(), dlock.ErrLockLost))
	case <-time.After(30 * time.Second):
		fmt.Println("still held")
	}
	fmt.Println("unlock:", errors.Is(lease.Unlock(ctx), dlock.ErrNotHeld))
	// Output:
	// lost: true
	// unlock: true
}
