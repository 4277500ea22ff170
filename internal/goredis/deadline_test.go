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

// TestMustLeaveEarly pins which callers can stop waiting before their round
// trip ends: a batched call waits on copies when its context has a
// deadline, or can end on a client that never times out; a direct call gets
// a goroutine of its own in those cases, unless go-redis enforces the
// deadline itself.
func TestMustLeaveEarly(t *testing.T) {
	background := context.Background()
	cancelOnly, cancel := context.WithCancel(background)
	defer cancel()
	withDeadline, cancel2 := context.WithTimeout(background, time.Minute)
	defer cancel2()

	client := func(o *redis.Options) *Driver {
		o.Addr = "127.0.0.1:1" // never dialled
		rdb := redis.NewClient(o)
		t.Cleanup(func() { _ = rdb.Close() })
		return New(rdb)
	}
	type want struct{ batched, goroutine [3]bool } // background, cancel-only, deadline
	cases := []struct {
		name string
		d    *Driver
		want want
	}{
		{"default options", client(&redis.Options{}),
			want{[3]bool{false, false, true}, [3]bool{false, false, true}}},
		{"ContextTimeoutEnabled", client(&redis.Options{ContextTimeoutEnabled: true}),
			want{[3]bool{false, false, true}, [3]bool{false, false, false}}},
		{"no read timeout", client(&redis.Options{ReadTimeout: -1}),
			want{[3]bool{false, true, true}, [3]bool{false, true, true}}},
		{"no read timeout, ContextTimeoutEnabled", client(&redis.Options{ReadTimeout: -1, ContextTimeoutEnabled: true}),
			want{[3]bool{false, true, true}, [3]bool{false, true, false}}},
		{"no write deadline", client(&redis.Options{WriteTimeout: -2, ContextTimeoutEnabled: true}),
			want{[3]bool{false, true, true}, [3]bool{false, true, true}}},
		{"unknown client", New(wrapped{}),
			want{[3]bool{false, true, true}, [3]bool{false, true, true}}},
	}
	for _, c := range cases {
		for i, ctx := range []context.Context{background, cancelOnly, withDeadline} {
			leave := c.d.mustLeaveEarly(ctx)
			goroutine := leave && !c.d.enforcesDeadline(ctx)
			if leave != c.want.batched[i] || goroutine != c.want.goroutine[i] {
				t.Errorf("%s, context %d: batched call leaves early %v, direct call in a goroutine %v; want %v, %v",
					c.name, i, leave, goroutine, c.want.batched[i], c.want.goroutine[i])
			}
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
