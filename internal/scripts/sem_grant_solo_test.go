package scripts

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// sem_acquire.lua: a lone waiter whose own call grants it permits holds
// solo ("<owner> <permits> <token>"); the same call sent again finds that
// grant, another owner waits behind it, and the string stays.
func TestSemAcquireFindsItsOwnSoloGrant(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	keys := []string{"s", "s:n", "s:l", "s:f", "s:q", "s:w"}
	acquire := func(owner string) (any, error) {
		return rdb.Eval(ctx, SemAcquire.Source(), keys, owner, 1, 10000, "1+", "1 60000 30000 5000 3600000 PUBLISH").Result()
	}
	expiredHolder(ctx, t, rdb, "s", "s:n", "gone", "1 7")
	queueWaiter(ctx, t, rdb, "s:q", "s:w", "me", 1, "1")

	v, err := acquire("me")
	code, token, px := reply3(t, v, err, "the waiter's own grant")
	if code != 1 || px != 10000 {
		t.Fatalf("the waiter's own grant: %v; want {1, fence, 10000}", v)
	}
	solo := "me 1 " + strconv.FormatInt(token, 10)
	wantString(ctx, t, rdb, "s", solo, "the waiter granted from the queue")
	for i := 0; i < 2; i++ {
		v, err = acquire("me")
		c, again, pttl := reply3(t, v, err, "the same call sent again")
		if c != 1 || again != token || pttl <= 0 || pttl > 10000 {
			t.Errorf("the same call sent again: %v; want {1, %d, pttl in (0, 10000]}", v, token)
		}
	}
	v, err = acquire("other")
	if c, pttl, pos := reply3(t, v, err, "another owner"); c != 0 || pttl <= 0 || pos != 1 {
		t.Errorf("another owner: %v; want {0, pttl, 1, 0, %d}", v, token)
	}
	wantString(ctx, t, rdb, "s", solo, "after the polls")
	if n := rdb.Exists(ctx, "s:n").Val(); n != 0 {
		t.Error("a counts hash left for the solo holder")
	}
}

// sem_acquire.lua: a call that grants a lone waiter permits and then takes
// permits of its own beside it turns the waiter's solo holder into the
// zset form first; with a limit stored, the waiter is granted in the zset
// form.
func TestSemAcquireBesideALoneGrant(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for _, limit := range []string{"", "3"} {
		keys := []string{"s" + limit, "s" + limit + ":n", "s" + limit + ":l", "s" + limit + ":f", "s" + limit + ":q", "s" + limit + ":w"}
		if limit != "" {
			rdb.Set(ctx, keys[2], limit, time.Hour)
		}
		expiredHolder(ctx, t, rdb, keys[0], keys[1], "gone", "3 7")
		queueWaiter(ctx, t, rdb, keys[4], keys[5], "waiter", 1, "1")
		v, err := rdb.Eval(ctx, SemAcquire.Source(), keys, "newcomer", 1, 10000, "0+", "3 60000 30000 5000 3600000 PUBLISH").Result()
		if c, _, px := reply3(t, v, err, "the newcomer"); c != 1 || px != 10000 {
			t.Fatalf("limit %q: the newcomer beside the lone grant: %v, %v; want {1, fence, 10000}", limit, v, err)
		}
		if typ := rdb.Type(ctx, keys[0]).Val(); typ != "zset" {
			t.Fatalf("limit %q: holders a %s, want a zset of two", limit, typ)
		}
		if m := rdb.ZRange(ctx, keys[0], 0, -1).Val(); len(m) != 2 {
			t.Errorf("limit %q: holders %v, want the waiter and the newcomer", limit, m)
		}
	}
}
