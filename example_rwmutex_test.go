package dlock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// Many readers share a read-write lock; a writer has it alone, and may turn
// its lease into a read lease without letting another writer in.
func ExampleRWMutex() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()
	rw := c.RWMutex("example:pricing-table")

	// Readers share the lock, each with a lease of its own.
	r1, err := rw.RLock(ctx)
	if err != nil {
		panic(err)
	}
	r2, err := rw.RLock(ctx)
	if err != nil {
		panic(err)
	}
	_, err = rw.TryLock(ctx)
	fmt.Println("writer refused while reading:", errors.Is(err, dlock.ErrNotObtained))
	r1.Unlock(ctx)
	r2.Unlock(ctx)

	// A writer holds it alone: update the table...
	w, err := rw.Lock(ctx)
	if err != nil {
		panic(err)
	}
	_, err = rw.TryRLock(ctx)
	fmt.Println("reader refused while writing:", errors.Is(err, dlock.ErrNotObtained))

	// ...then keep reading what it wrote while letting other readers in.
	r, err := rw.Downgrade(ctx, w)
	if err != nil {
		panic(err)
	}
	defer r.Unlock(ctx)
	fmt.Println("write lease ended:", errors.Is(w.Err(), dlock.ErrNotHeld))
	fmt.Println("read lease token is newer:", r.Token() > w.Token())
	other, err := rw.TryRLock(ctx)
	fmt.Println("another reader joins:", err == nil)
	other.Unlock(ctx)
	// Output:
	// writer refused while reading: true
	// reader refused while writing: true
	// write lease ended: true
	// read lease token is newer: true
	// another reader joins: true
}
