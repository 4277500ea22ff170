package goredis

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
