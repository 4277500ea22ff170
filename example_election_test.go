package dlock_test

import (
	"context"
	"fmt"

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
