package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// Elect one leader among a service's replicas, and let everyone ask who
// it is.
func ExampleElection() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	c, _ := dlock.New(rdb)
	defer c.Close()
	ctx := context.Background()

	e := c.Election("example:scheduler")
	ld, err := e.Campaign(ctx, "replica-1 at 10.0.0.7:8080") // waits until this replica leads
	if err != nil {
		panic(err)
	}
	leader, _ := e.Leader(ctx) // from any replica
	fmt.Println("leader:", leader.Value, "term is the leadership's token:", leader.Term == ld.Term())

	// Lead until done, or until the leadership is lost (ld.Done closes).
	fmt.Println("resigned:", ld.Resign(ctx))
	// Output:
	// leader: replica-1 at 10.0.0.7:8080 term is the leadership's token: true
	// resigned: <nil>
}

// Run work only while leading, campaigning again after a loss: the
// one-call form.
func ExampleElection_Run() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	c, _ := dlock.New(rdb)
	defer c.Close()

	err := c.Election("example:singleton-consumer").Run(context.Background(), "replica-1",
		func(ctx context.Context) error {
			// Consume until ctx ends: it is cancelled, with cause
			// dlock.ErrLockLost, if the leadership is lost, and Run then
			// campaigns again. Returning ends Run.
			fmt.Println("consuming as the leader")
			return nil
		})
	fmt.Println("Run returned:", err)
	// Output:
	// consuming as the leader
	// Run returned: <nil>
}

// Run a cron job once across hosts whose cron fires moments apart: the
// lock outlasts a fast job by the minimum hold, so the hosts that fire
// later find it held and skip.
func ExampleWithMinHold() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	c, _ := dlock.New(rdb)
	defer c.Close()
	ctx := context.Background()

	name := fmt.Sprintf("example:report-%d", time.Now().UnixNano()) // e.g. "nightly-report"
	report := c.Mutex(name, dlock.WithMinHold(10*time.Minute))
	for _, host := range []string{"host-a", "host-b"} { // cron fired on both
		lease, err := report.TryLock(ctx)
		if err != nil {
			fmt.Println(host, "skips:", errors.Is(err, dlock.ErrNotObtained))
			continue
		}
		fmt.Println(host, "runs the report")
		_ = lease.Unlock(ctx) // returns at once; the lock stays held for the 10 minutes
	}
	// Output:
	// host-a runs the report
	// host-b skips: true
}
