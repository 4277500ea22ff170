package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// See who holds a lock and who waits for it, as an operator would.
func ExampleClient_Inspect() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	ctx := context.Background()

	worker, err := dlock.New(rdb, dlock.WithOwnerInfo("host=api-7 pid=4121"))
	if err != nil {
		panic(err)
	}
	defer worker.Close()
	lease, err := worker.Mutex("example:inspect").Lock(ctx)
	if err != nil {
		panic(err)
	}
	defer lease.Unlock(ctx)

	operator, err := dlock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer operator.Close()
	infos, err := operator.Inspect(ctx, "example:inspect")
	if err != nil {
		panic(err)
	}
	for _, info := range infos {
		fmt.Printf("%s %q: %d holder, %d waiting\n", info.Kind, info.Name, len(info.Holders), len(info.Waiters))
		for _, h := range info.Holders {
			fmt.Printf("held by %s, with the lease's token: %v\n", h.Info, h.Token == lease.Token())
		}
	}
	// Output:
	// mutex "example:inspect": 1 holder, 0 waiting
	// held by host=api-7 pid=4121, with the lease's token: true
}

// Take a lock away from a stuck holder: it learns at its next renewal.
func ExampleClient_ForceUnlock() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	ctx := context.Background()

	stuck, err := dlock.New(rdb, dlock.WithTTL(300*time.Millisecond)) // renewed every 100ms
	if err != nil {
		panic(err)
	}
	defer stuck.Close()
	lease, err := stuck.Mutex("example:force-unlock").Lock(ctx)
	if err != nil {
		panic(err)
	}

	operator, err := dlock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer operator.Close()
	n, err := operator.ForceUnlock(ctx, "example:force-unlock")
	fmt.Println("released:", n, err)

	<-lease.Done()
	fmt.Println("the holder lost it:", errors.Is(lease.Err(), dlock.ErrLockLost))
	// Output:
	// released: 1 <nil>
	// the holder lost it: true
}
