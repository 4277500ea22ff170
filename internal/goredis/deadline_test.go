package goredis

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestMustLeaveEarly pins which calls get a goroutine of their own: those
// whose context has a deadline go-redis would not enforce, and every call
// that can end when the client itself would wait for ever.
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
	cases := []struct {
		name string
		d    *Driver
		want [3]bool // background, cancel-only, deadline
	}{
		{"default options", client(&redis.Options{}), [3]bool{false, false, true}},
		{"ContextTimeoutEnabled", client(&redis.Options{ContextTimeoutEnabled: true}), [3]bool{false, false, false}},
		{"no read timeout", client(&redis.Options{ReadTimeout: -1}), [3]bool{false, true, true}},
		{"no write deadline", client(&redis.Options{WriteTimeout: -2, ContextTimeoutEnabled: true}), [3]bool{false, true, true}},
		{"unknown client", New(wrapped{}), [3]bool{false, true, true}},
	}
	for _, c := range cases {
		for i, ctx := range []context.Context{background, cancelOnly, withDeadline} {
			if got := c.d.mustLeaveEarly(ctx); got != c.want[i] {
				t.Errorf("%s, context %d: mustLeaveEarly = %v, want %v", c.name, i, got, c.want[i])
			}
		}
	}
}

// wrapped is a Client whose options the driver cannot read.
type wrapped struct{ Client }
