package goredis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
)

// count increments KEYS[1] and returns ARGV[1]: a call whose effect a test
// can read back.
var count = driver.NewScript("redis.call('incr', KEYS[1]) return ARGV[1]")

// TestLeftCallsTellWhenTheyEnd: a call that Run stops waiting for at its
// deadline, sent directly or in a pipeline with another caller's, fails
// with a driver.InFlightError whose Done closes only once the script has
// run on the server: a clean-up that waits for it cannot overtake it.
func TestLeftCallsTellWhenTheyEnd(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	proxy.SetLatency(50 * time.Millisecond)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()}) // go-redis does not end calls at deadlines
	t.Cleanup(func() { _ = rdb.Close() })
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = direct.Close() })
	d := New(rdb)
	defer d.Close()
	ctx := context.Background()
	// Dial and load the script first: go-redis fails a call whose context
	// ends before it has a connection.
	for _, s := range []*driver.Script{count, echo} {
		warm := &driver.Call{Script: s, Keys: []string{"warm"}, Args: []any{"warm"}}
		if d.Run(ctx, warm); warm.Err != nil {
			t.Fatalf("warm-up call: %v", warm.Err)
		}
	}

	for _, batched := range []bool{false, true} {
		key := "direct"
		if batched {
			key = "batched"
		}
		other := make(chan struct{})
		if batched {
			// A call in flight makes the next one join a pipeline.
			go func() {
				defer close(other)
				d.Run(ctx, &driver.Call{Script: echo, Keys: []string{"k"}, Args: []any{"other"}})
			}()
			for d.kit.InFlight() == 0 {
				time.Sleep(time.Millisecond) // until the other call is in Run: it signals nothing
			}
		} else {
			close(other)
		}
		// Long enough for the driver's worker to have the call sent on a
		// loaded machine (go-redis sends nothing for a context that has
		// ended), far shorter than the round trip.
		cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		c := &driver.Call{Script: count, Keys: []string{key}, Args: []any{"mine"}}
		d.Run(cctx, c)
		cancel()
		<-other
		var inFlight *driver.InFlightError
		if !errors.As(c.Err, &inFlight) || !errors.Is(c.Err, context.DeadlineExceeded) {
			t.Fatalf("%s: a call left at a 20 ms deadline over a 100 ms round trip: reply %v, error %v (%T); want a driver.InFlightError for the deadline",
				key, c.Reply, c.Err, c.Err)
		}
		select {
		case <-inFlight.Done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Done not closed 10 s after the call was left", key)
		}
		if n, err := direct.Get(ctx, key).Int(); err != nil || n != 1 {
			t.Errorf("%s: when Done closed, the script had run %d times (%v); want 1", key, n, err)
		}
	}
	waitIdle(t, d)
}
