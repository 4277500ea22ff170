package scripts

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
)

// A grant from the queue that leaves one holder, a writer of a read-write
// lock or a lone Semaphore holder, writes the solo form (rw_lib.lua,
// sem_lib.lua). The acquire scripts must then read either form when they
// look for the caller's own grant: a waiter's poll that has not heard of
// its grant, or the same call sent again after its reply was lost.

// queueWaiter puts member at the queue's tail with a live lease, asking for
// a 5 s claim window and, when extra is not "", that extra field.
func queueWaiter(ctx context.Context, t *testing.T, rdb *redis.Client, queue, waiters, member string, score float64, extra string) {
	t.Helper()
	entry := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10) + " 5000"
	if extra != "" {
		entry += " " + extra
	}
	if err := rdb.ZAdd(ctx, queue, redis.Z{Score: score, Member: member}).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.HSet(ctx, waiters, member, entry)
	rdb.PExpire(ctx, queue, time.Minute)
	rdb.PExpire(ctx, waiters, time.Minute)
}

// expiredHolder writes a holder whose expiry has passed in the zset form,
// so that an acquire goes to its full path and grants from the queue.
func expiredHolder(ctx context.Context, t *testing.T, rdb *redis.Client, holders, side, member, entry string) {
	t.Helper()
	if err := rdb.ZAdd(ctx, holders, redis.Z{Score: 1, Member: member}).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.HSet(ctx, side, member, entry)
	rdb.PExpire(ctx, holders, time.Minute)
	rdb.PExpire(ctx, side, time.Minute)
}

// wantString fails unless key holds want as a string with an expiry.
func wantString(ctx context.Context, t *testing.T, rdb *redis.Client, key, want, when string) {
	t.Helper()
	got, err := rdb.Get(ctx, key).Result()
	if err != nil || got != want || rdb.PTTL(ctx, key).Val() <= 0 {
		t.Fatalf("%s: %s = %q, %v (type %s); want the solo form %q", when, key, got, err, rdb.Type(ctx, key).Val(), want)
	}
}

// reply3 reads a {code, x, y, ...} reply's first three numbers.
func reply3(t *testing.T, v any, err error, when string) (code, x, y int64) {
	t.Helper()
	a, ok := v.([]any)
	if err != nil || !ok || len(a) < 3 {
		t.Fatalf("%s: %v, %v; want a reply of at least three numbers", when, v, err)
	}
	code, _ = a[0].(int64)
	x, _ = a[1].(int64)
	y, _ = a[2].(int64)
	return code, x, y
}

// rw_acquire.lua: a waiter whose own call grants it the lock (the holder
// expired) holds solo; the same call sent again finds that grant, with the
// token the fencing key issued, and another waiter polling waits behind it;
// the string stays.
func TestRWAcquireFindsItsOwnSoloGrant(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	keys := []string{"rw", "rw:f", "rw:q", "rw:w", "rw:t"}
	acquire := func(member string) (any, error) {
		return rdb.Eval(ctx, RWAcquire.Source(), keys, member, 10000, "1p", "30000 5000 3600000").Result()
	}
	expiredHolder(ctx, t, rdb, "rw", "rw:t", "Wgone", "7")
	queueWaiter(ctx, t, rdb, "rw:q", "rw:w", "Wme", 1, "")
	queueWaiter(ctx, t, rdb, "rw:q", "rw:w", "Rother", 2, "")

	v, err := acquire("Wme")
	code, token, px := reply3(t, v, err, "the waiter's own grant")
	if code != 1 || px != 10000 {
		t.Fatalf("the waiter's own grant: %v; want {1, fence, 10000}", v)
	}
	wantString(ctx, t, rdb, "rw", "Wme", "the writer granted from the queue")
	if f, _ := rdb.Get(ctx, "rw:f").Int64(); f != token {
		t.Errorf("fencing key %d, want the grant's token %d", f, token)
	}
	for i := 0; i < 2; i++ { // the same call sent again, twice
		v, err = acquire("Wme")
		c, again, pttl := reply3(t, v, err, "the same call sent again")
		if c != 1 || again != token || pttl <= 0 || pttl > 10000 {
			t.Errorf("the same call sent again: %v; want {1, %d, pttl in (0, 10000]}", v, token)
		}
	}
	v, err = acquire("Rother")
	if c, pttl, pos := reply3(t, v, err, "a reader polling behind the writer"); c != 0 || pttl <= 0 || pos != 1 {
		t.Errorf("a reader polling behind the writer: %v; want {0, pttl, 1, 0, %d}", v, token)
	}
	wantString(ctx, t, rdb, "rw", "Wme", "after the polls")
	if n := rdb.ZCard(ctx, "rw:q").Val(); n != 1 {
		t.Errorf("%d queued, want the reader alone", n)
	}
}

// rw_acquire.lua: a call that grants the head writer of the queue, not
// itself, leaves the writer solo and answers as a waiter behind it would
// be answered; a fencing key that is no counter is reported as the full
// path reports it, even to the solo holder's own call.
func TestRWAcquireWaitsBehindAWriterItGranted(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	keys := []string{"rw", "rw:f", "rw:q", "rw:w", "rw:t"}
	acquire := func(member string) (any, error) {
		return rdb.Eval(ctx, RWAcquire.Source(), keys, member, 10000, "1p", "30000 5000 3600000").Result()
	}
	expiredHolder(ctx, t, rdb, "rw", "rw:t", "Rgone", "7")
	queueWaiter(ctx, t, rdb, "rw:q", "rw:w", "Whead", 1, "")
	v, err := acquire("Rlate")
	c, pttl, pos := reply3(t, v, err, "a newcomer behind the head writer")
	fence, _ := rdb.Get(ctx, "rw:f").Int64()
	if a := v.([]any); c != 0 || pttl != 5000 || pos != 1 || len(a) != 5 || a[3] != int64(0) || a[4] != fence {
		t.Errorf("a newcomer behind the head writer: %v; want {0, 5000, 1, 0, the writer's token}", v)
	}
	wantString(ctx, t, rdb, "rw", "Whead", "the head writer granted by another's call")
	if n := rdb.Exists(ctx, "rw:t").Val(); n != 0 {
		t.Error("a tokens entry written for the solo writer")
	}

	rdb.Set(ctx, "rw:f", "not a counter", time.Hour)
	if v, err := acquire("Whead"); err == nil || !strings.Contains(err.Error(), "DLOCK_CONFLICT") {
		t.Errorf("the solo writer's call with a foreign fencing key: %v, %v; want DLOCK_CONFLICT", v, err)
	}
	wantString(ctx, t, rdb, "rw", "Whead", "after the conflict")
}
