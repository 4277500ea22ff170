package fence_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A holder whose lock expired while it was stalled is refused by the store,
// so it cannot overwrite the work of the holder that came after it.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.SharedAddr()})
	defer rdb.Close()
	c, _ := dlock.New(rdb)
	defer c.Close()
	store, _ := fence.New(rdb)

	const key = "{example:stock:42}" // a hash tag keeps its mark in its slot
	decrement := func(old string, ok bool) (string, error) {
		n, err := strconv.Atoi(old)
		if !ok {
			n, err = 10, nil // initial stock
		}
		return strconv.Itoa(n - 1), err
	}

	// The first holder takes the lock, then stalls past its TTL.
	stalled, _ := c.Mutex("example:stock:42", dlock.WithTTL(50*time.Millisecond), dlock.WithAutoRenew(false)).Lock(ctx)
	time.Sleep(100 * time.Millisecond)

	// The lock expired; the next holder gets a higher token and writes.
	next, _ := c.Mutex("example:stock:42").Lock(ctx)
	v, err := store.Update(ctx, key, next.Token(), decrement)
	fmt.Println("next holder wrote", v, err)

	// The stalled holder wakes up: its write is refused.
	_, err = store.Update(ctx, key, stalled.Token(), decrement)
	fmt.Println("stalled holder refused:", errors.Is(err, fence.ErrStaleToken))

	_ = next.Unlock(ctx)
	fmt.Println("stalled holder's Unlock:", errors.Is(stalled.Unlock(ctx), dlock.ErrNotHeld))
	rdb.Del(ctx, key, key+":fence")
	// Output:
	// next holder wrote 9 <nil>
	// stalled holder refused: true
	// stalled holder's Unlock: true
}
