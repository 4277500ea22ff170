package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// Limit how many workers, across every replica, call a fragile downstream
// service at once.
func ExampleSemaphore() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()

	sem := c.Semaphore("example:payments-api", 3) // at most 3 calls at a time
	permits, err := sem.Acquire(ctx, 1)           // waits in line; TryAcquire doesn't wait
	if err != nil {
		panic(err)
	}
	fmt.Println("holding", permits.N(), "permit")

	// Pass permits.Token() to the downstream if it can check fencing
	// tokens; watch permits.Done() for loss while working.
	if err := permits.Release(ctx); err != nil { // wakes the next waiter
		panic(err)
	}

	// A big batch takes two permits at once. Raising the limit at run time
	// applies to every process using the semaphore.
	if err := sem.SetPermits(ctx, 4); err != nil {
		panic(err)
	}
	batch, err := sem.Acquire(ctx, 2)
	if err != nil {
		panic(err)
	}
	defer batch.Release(ctx)
	free, _ := sem.Available(ctx)
	fmt.Println("batch holds", batch.N(), "permits; free:", free)
	// Output:
	// holding 1 permit
	// batch holds 2 permits; free: 2
}

// Grow and shrink a worker pool's share of a downstream at run time, from
// any process: each change adds to the limit every process sees.
func ExampleSemaphore_AddPermits() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()

	sem := c.Semaphore("example:exports", 4)
	if err := sem.SetPermits(ctx, 4); err != nil { // a known start
		panic(err)
	}
	limit, err := sem.AddPermits(ctx, 2) // a new replica came up
	if err != nil {
		panic(err)
	}
	fmt.Println("limit:", limit)
	limit, err = sem.AddPermits(ctx, -3) // the downstream is struggling
	if err != nil {
		panic(err)
	}
	fmt.Println("limit:", limit)
	_, err = sem.AddPermits(ctx, -3) // no semaphore has fewer than 1 permit
	fmt.Println("refused:", errors.Is(err, dlock.ErrInvalidArgument))
	// Output:
	// limit: 6
	// limit: 3
	// refused: true
}

// Give permits back as a job's stages finish: a bulk load takes three
// permits, and keeps one for its final, lighter stage.
func ExamplePermits_ReleaseN() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()

	sem := c.Semaphore("example:warehouse-connections", 4)
	permits, err := sem.Acquire(ctx, 3)
	if err != nil {
		panic(err)
	}
	defer permits.Release(ctx) // whatever is still held
	// ... the parallel stage, on three connections ...
	if err := permits.ReleaseN(ctx, 2); err != nil { // waiters get them now
		panic(err)
	}
	free, _ := sem.Available(ctx)
	fmt.Println("still holding", permits.N(), "permit; free:", free)
	// Output:
	// still holding 1 permit; free: 3
}

// Wait until every shard of a job has been loaded, by whichever replicas
// loaded them.
func ExampleLatch() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const shards = 3
	latch := c.Latch("example:import-2024-06-01")
	if ok, err := latch.TrySetCount(ctx, shards); err != nil || !ok {
		panic(fmt.Sprint("another import is still running: ", err))
	}

	var wg sync.WaitGroup
	for i := 0; i < shards; i++ {
		wg.Add(1)
		shard := i
		go func() { // in production, other processes
			defer wg.Done()
			// ... load one shard ...
			// The key names this shard's count-down: after an error the
			// count may have moved or not, and a retry with the same key
			// counts once either way.
			done := dlock.WithIdempotencyKey(ctx, fmt.Sprintf("import-2024-06-01/shard-%d", shard))
			l := c.Latch("example:import-2024-06-01")
			err := l.CountDown(done)
			if err != nil {
				err = l.CountDown(done)
			}
			if err != nil {
				panic(err)
			}
		}()
	}

	// Returns once the count is zero; with ctx's error (and
	// dlock.ErrNotObtained) if the deadline comes first.
	if err := latch.Wait(ctx); err != nil {
		panic(err)
	}
	n, _ := latch.Count(ctx)
	fmt.Println("all shards loaded; count:", n)
	wg.Wait()
	// Output:
	// all shards loaded; count: 0
}
