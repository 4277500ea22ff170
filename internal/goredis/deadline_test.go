package goredis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/driverkit"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestClientTimeouts pins what the driver reads from a go-redis client's
// options: whether go-redis ends a call at its context's deadline
// (ContextTimeoutEnabled, with deadlines set at all), and whether read and
// write timeouts end a call on a silent server.
func TestClientTimeouts(t *testing.T) {
	client := func(o *redis.Options) Client {
		o.Addr = "127.0.0.1:1" // never dialled
		rdb := redis.NewClient(o)
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	for _, tc := range []struct {
		name string
		rdb  Client
		want driverkit.Ends
		read time.Duration
	}{
		{"default options", client(&redis.Options{}), driverkit.Ends{Timeouts: true}, 3 * time.Second},
		{"ContextTimeoutEnabled", client(&redis.Options{ContextTimeoutEnabled: true}), driverkit.Ends{Deadline: true, Timeouts: true}, 3 * time.Second},
		{"no read timeout", client(&redis.Options{ReadTimeout: -1}), driverkit.Ends{}, 0},
		{"no read timeout, ContextTimeoutEnabled", client(&redis.Options{ReadTimeout: -1, ContextTimeoutEnabled: true}), driverkit.Ends{Deadline: true}, 0},
		{"no write deadline", client(&redis.Options{WriteTimeout: -2, ContextTimeoutEnabled: true}), driverkit.Ends{}, 3 * time.Second},
		{"unknown client", wrapped{}, driverkit.Ends{}, 0},
	} {
		ends, read := clientTimeouts(tc.rdb)
		if ends != tc.want || read != tc.read {
			t.Errorf("%s: %+v, read timeout %v; want %+v, %v", tc.name, ends, read, tc.want, tc.read)
		}
	}
}

// wrapped is a Client whose options the driver cannot read.
type wrapped struct{ Client }

// TestRunToReplyWaitsForTheReply: on a client that does not enforce context
// deadlines, Run returns at a deadline shorter than the link's latency and
// RunToReply waits for the reply; on a client that enforces them, both end
// at the deadline.
func TestRunToReplyWaitsForTheReply(t *testing.T) {
	proxy := redistest.StartProxy(t, redistest.Start(t).Addr())
	proxy.SetLatency(20 * time.Millisecond)
	for _, enforced := range []bool{false, true} {
		rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: enforced})
		t.Cleanup(func() { _ = rdb.Close() })
		d := New(rdb)
		t.Cleanup(func() { _ = d.Close() })
		// go-redis fails a call whose context ends before it has a
		// connection, and a dial takes two round trips here: dial first,
		// and call RunToReply first, before Run leaves the connection busy.
		// The same goes for loading the script after NOSCRIPT.
		warm := &driver.Call{Script: echo, Keys: []string{"k"}, Args: []any{"warm"}}
		if d.Run(context.Background(), warm); warm.Err != nil {
			t.Fatalf("warm-up call: %v", warm.Err)
		}
		for _, run := range []struct {
			name      string
			f         func(context.Context, ...*driver.Call)
			wantReply bool
		}{{"RunToReply", d.RunToReply, !enforced}, {"Run", d.Run, false}} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			c := &driver.Call{Script: echo, Keys: []string{"k"}, Args: []any{run.name}}
			run.f(ctx, c)
			cancel()
			if got := c.Err == nil && c.Reply == run.name; got != run.wantReply || (!got && !errors.Is(c.Err, context.DeadlineExceeded)) {
				t.Errorf("ContextTimeoutEnabled=%v: %s with a 1 ms deadline over a 40 ms round trip: reply %v, error %v; want a reply: %v",
					enforced, run.name, c.Reply, c.Err, run.wantReply)
			}
		}
	}
}
