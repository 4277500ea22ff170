package dlock

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// TestQueueKeep: the keep renews the lease of each member still queued,
// with the rest of its entry as it was, and reports a member no longer
// queued without queueing it again; also on a server without ZMSCORE
// (Redis before 6.2, played by a user that may not run it).
func TestQueueKeep(t *testing.T) {
	srv := redistest.Start(t)
	for _, user := range []struct{ name, rules string }{
		{"with-zmscore", "+@all"},
		{"without-zmscore", "+@all -zmscore"},
	} {
		t.Run(user.name, func(t *testing.T) {
			srv.Do(t, append([]any{"ACL", "SETUSER", user.name, "reset", "on", ">pw", "~*", "&*"}, anySlice(strings.Fields(user.rules))...)...)
			opts := srv.Options()
			opts.Username, opts.Password = user.name, "pw"
			rdb := redis.NewClient(opts)
			t.Cleanup(func() { _ = rdb.Close() })
			c, err := New(rdb)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			checkQueueKeep(t, c, srv)
		})
	}
}

func anySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func checkQueueKeep(t *testing.T, c *Client, srv *redistest.Server) {
	ctx := placeTestCtx(t)
	queue, waiters := "dlock:{keep-test}:q", "dlock:{keep-test}:w"
	srv.Do(t, "DEL", queue, waiters)
	srv.Do(t, "ZADD", queue, "1", "a", "2", "b")
	srv.Do(t, "HSET", waiters, "a", "1 3000 2", "gone", "1 3000", "b", "1 2500")
	call := &driver.Call{Script: scripts.QueueKeep, Keys: []string{queue, waiters}, Args: []any{int64(60000), "a", "gone", "b"}}
	c.drv.Run(ctx, call)
	if call.Err != nil {
		t.Fatal(call.Err)
	}
	if fmt.Sprint(call.Reply) != "[1 0 1]" {
		t.Errorf("reply %v; want [1 0 1]", call.Reply)
	}
	now, _ := srv.Do(t, "TIME").([]any)
	var sec int64
	fmt.Sscan(fmt.Sprint(now[0]), &sec)
	for member, rest := range map[string]string{"a": " 3000 2", "b": " 2500"} {
		entry, _ := srv.Do(t, "HGET", waiters, member).(string)
		var expiry int64
		if _, err := fmt.Sscan(entry, &expiry); err != nil || !strings.HasSuffix(entry, rest) {
			t.Errorf("%s's entry %q; want a new expiry, then %q", member, entry, rest)
		}
		if expiry < sec*1000+50000 {
			t.Errorf("%s's lease ends at %d ms; want about a minute after %d s", member, expiry, sec)
		}
	}
	if score := srv.Do(t, "ZSCORE", queue, "gone"); score != nil {
		t.Errorf("the keep queued a member that was not queued (score %v)", score)
	}
	if pttl, _ := srv.Do(t, "PTTL", queue).(int64); pttl < 50000 {
		t.Errorf("queue PTTL %d ms; want at least the lease", pttl)
	}

	// With a lock key, the reply ends with its PTTL.
	lock := "dlock:{keep-test}"
	srv.Do(t, "SET", lock, "holder", "PX", "40000")
	call = &driver.Call{Script: scripts.QueueKeep, Keys: []string{queue, waiters, lock}, Args: []any{int64(60000), "a", "gone"}}
	c.drv.Run(ctx, call)
	reply, _ := call.Reply.([]any)
	if call.Err != nil || len(reply) != 3 || fmt.Sprint(reply[:2]) != "[1 0]" {
		t.Fatalf("reply %v, %v; want [1 0 <the lock's PTTL>]", call.Reply, call.Err)
	}
	if pttl, _ := reply[2].(int64); pttl < 30000 || pttl > 40000 {
		t.Errorf("the lock's PTTL in the reply %v; want about 40000", reply[2])
	}
	srv.Do(t, "DEL", lock)
	c.drv.Run(ctx, call)
	if fmt.Sprint(call.Reply) != "[1 0 -2]" {
		t.Errorf("reply %v; want [1 0 -2] once the lock key is gone", call.Reply)
	}
}

// TestGrantToAKeptWaiterIsValid: a waiter whose place the leader keeps
// asks Redis nothing itself, sometimes for longer than its claim window.
// A grant it then hears counts its validity from the leader's last keep
// that found it queued, not from its own last attempt, so the Lease
// returned is not lost at once with its claim window already over.
func TestGrantToAKeptWaiterIsValid(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := placeTestCtx(t)
	const name = "places-grant-valid"
	opts := []Option{WithTTL(300 * time.Millisecond)} // claim window 300ms, refresh 100ms
	holder, err := New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close() })
	held, err := holder.FairMutex(name, opts...).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	queue := c.FairMutex(name).m.keys.queue
	w := &placeWaiters{c: c}
	leases := make(chan *Lease, 2)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	waitCtx, stopWaiting := context.WithCancel(ctx)
	t.Cleanup(stopWaiting) // runs first: a failed test does not wait for the Locks
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.FairMutex(name, opts...).Lock(waitCtx)
			if err != nil {
				if waitCtx.Err() == nil {
					t.Errorf("Lock: %v", err)
				}
				return
			}
			leases <- l
		}()
		w.waitPlaces(t, srv, queue, i+1)
	}
	// The follower's own attempt is now well over a claim window old.
	w.waitKept(t, queue, 1, 6)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	next := func() *Lease {
		t.Helper()
		select {
		case l := <-leases:
			return l
		case <-time.After(30 * time.Second):
			t.Fatal("no waiter granted 30s after the lock was released")
			return nil
		}
	}
	first := next()
	if err := first.Unlock(ctx); err != nil {
		t.Fatalf("the leader's Unlock: %v", err)
	}
	second := next() // granted by that Unlock, heard on the channel
	select {
	case <-second.Done():
		t.Fatalf("the follower's lease was lost as Lock returned it: %v", second.Err())
	default:
	}
	if left := time.Until(LeaseValidUntil(second)); left <= 0 {
		t.Errorf("the follower's lease is valid for %v more; want some of its TTL", left)
	}
	if err := second.Unlock(ctx); err != nil {
		t.Errorf("the follower's Unlock: %v", err)
	}
}
