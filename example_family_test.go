package dlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// A reentrant lock: the same owner may lock again while holding it. The
// owner is an identity carried by the context, here a job's id.
func ExampleReentrantMutex() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	c, _ := dlock.New(rdb)
	defer c.Close()
	ctx := dlock.WithOwner(context.Background(), "job-42")
	m := c.ReentrantMutex("example:report")

	outer, err := m.Lock(ctx)
	if err != nil {
		panic(err)
	}
	inner, err := m.Lock(ctx) // the same owner: one more hold, no wait
	if err != nil {
		panic(err)
	}
	n, _ := m.HoldCount(ctx)
	fmt.Println("holds:", n)

	_ = inner.Unlock(ctx)
	n, _ = m.HoldCount(ctx)
	fmt.Println("after one Unlock:", n)
	_ = outer.Unlock(ctx) // the last hold releases the lock
	n, _ = m.HoldCount(ctx)
	fmt.Println("after the last:", n)
	// Output:
	// holds: 2
	// after one Unlock: 1
	// after the last: 0
}

// A fair lock grants in strict arrival order, every waiting goroutine in
// its own place in the queue.
func ExampleFairMutex() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	c, _ := dlock.New(rdb)
	defer c.Close()
	ctx := context.Background()

	first, err := c.FairMutex("example:fair").Lock(ctx)
	if err != nil {
		panic(err)
	}
	got := make(chan int64)
	go func() {
		l, err := c.FairMutex("example:fair").Lock(ctx) // waits its turn
		if err != nil {
			panic(err)
		}
		got <- l.Token()
		_ = l.Unlock(ctx)
	}()
	// Wait until the other goroutine has queued; Unlock then hands the
	// lock straight to it (and no TryLock could jump the queue meanwhile).
	for {
		infos, _ := c.Inspect(ctx, "example:fair")
		if len(infos) > 0 && len(infos[0].Waiters) == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	_ = first.Unlock(ctx)
	fmt.Println("the waiter's token is higher:", <-got > first.Token())
	// Output:
	// the waiter's token is higher: true
}

// A multi-lock holds several locks as one: all of them or none.
func ExampleMultiLock() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	c, _ := dlock.New(rdb)
	defer c.Close()
	ctx := context.Background()

	// Move money between two accounts: both must be locked, and two
	// transfers in opposite directions must not deadlock.
	l, err := c.MultiLock("example:account:2", "example:account:1").Lock(ctx)
	if err != nil {
		panic(err)
	}
	defer l.Unlock(ctx)

	_, err = c.Mutex("example:account:1").TryLock(ctx)
	fmt.Println("account 1 is held:", err != nil)
	tok1, _ := l.TokenOf("example:account:1")
	tok2, _ := l.TokenOf("example:account:2")
	fmt.Println("each account has its own fencing token:", tok1 > 0 && tok2 > 0)
	// Output:
	// account 1 is held: true
	// each account has its own fencing token: true
}
