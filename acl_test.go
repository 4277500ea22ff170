package dlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
)

// minimalACL is the ACL rule list that README.md gives for a Redis user of
// dlock with the default key prefix, on one server or with Sentinel.
var minimalACL = strings.Fields(`resetkeys ~dlock:* resetchannels &dlock:* -@all
	+hello +auth +ping
	+evalsha +eval +publish +spublish +subscribe +unsubscribe +ssubscribe +sunsubscribe +wait +scan
	+get +set +del +incr +pexpire +pttl +exists +time +type
	+zadd +zcard +zrange +zrangebyscore +zrank +zrem +zremrangebyscore +zscore +zmscore
	+hdel +hexists +hget +hmget +hset +sadd +scard +smembers +srem`)

// TestMinimalACLRunsEveryPrimitive: a Redis user with no more than the
// documented rules runs every primitive, hand-offs, inspection and List.
func TestMinimalACLRunsEveryPrimitive(t *testing.T) {
	srv := redistest.Start(t)
	rules := make([]any, len(minimalACL))
	for i, r := range minimalACL {
		rules[i] = r
	}
	h := &blockingHandler{}
	c := newACLClient(t, srv, "locks", rules, dlock.WithLogger(slog.New(h)))
	other := newACLClient(t, srv, "locks", rules, dlock.WithLogger(slog.New(h)))
	ctx := testCtx(t)
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}

	held := mustLock(t, c, "m")
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		l, err := other.Mutex("m").Lock(waitCtx)
		got <- unlockIf(ctx, l, err)
	}()
	waitFor(t, 10*time.Second, func() bool {
		n, _ := srv.Do(t, "ZCARD", "dlock:{m}:q").(int64)
		return n == 1
	}, "the waiter queued")
	check("Extend", held.Extend(ctx, time.Minute))
	check("Unlock with a waiter", held.Unlock(ctx))
	check("the waiter", <-got)

	re, err := c.ReentrantMutex("re").Lock(dlock.WithOwner(ctx, "o"))
	check("ReentrantMutex.Lock", unlockIf(ctx, re, err))
	w, err := c.RWMutex("rw").Lock(ctx)
	if err == nil {
		var r *dlock.Lease
		r, err = c.RWMutex("rw").Downgrade(ctx, w)
		check("RWMutex.Downgrade", unlockIf(ctx, r, err))
	}
	check("RWMutex.Lock", err)
	p, err := c.Semaphore("sem", 2).Acquire(ctx, 1)
	if err == nil {
		check("Semaphore.Release", p.Release(ctx))
	}
	check("Semaphore.Acquire", err)
	_, err = c.Semaphore("sem", 2).AddPermits(ctx, 1)
	check("Semaphore.AddPermits", err)
	l := c.Latch("latch")
	_, err = l.TrySetCount(ctx, 1)
	check("Latch.TrySetCount", err)
	check("Latch.CountDown", l.CountDown(ctx))
	check("Latch.Wait", l.Wait(ctx))
	_, err = c.Inspect(ctx, "m")
	check("Inspect", err)
	_, err = c.List(ctx, "*")
	check("List", err)
	_, err = c.ForceUnlock(ctx, "m")
	check("ForceUnlock", err)
	if r, ok := h.find("dlock: cannot subscribe; waiting by polling"); ok {
		t.Errorf("logged %q", r.Message)
	}
}

// aclClient creates the ACL user name with rules (after "reset on >pw")
// and returns a go-redis client that logs in as it.
func aclClient(t *testing.T, srv *redistest.Server, name string, rules ...any) *redis.Client {
	t.Helper()
	srv.Do(t, append([]any{"ACL", "SETUSER", name, "reset", "on", ">pw"}, rules...)...)
	opts := srv.Options()
	opts.Username, opts.Password = name, "pw"
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// newACLClient returns a dlock Client over aclClient(srv, user, rules),
// closed when the test ends.
func newACLClient(t *testing.T, srv *redistest.Server, user string, rules []any, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	return newClientOn(t, aclClient(t, srv, user, rules...), opts...)
}

// pubsubDenied are ACL users that may run every command on every key but
// cannot publish or subscribe: one denied the commands, and one given no
// channels, which is what Redis 7 gives a user created with ACL SETUSER
// unless acl-pubsub-default says otherwise.
var pubsubDenied = map[string][]any{
	"no-pubsub-commands": {"~*", "&*", "+@all", "-publish", "-spublish", "-subscribe", "-ssubscribe"},
	"no-channels":        {"~*", "resetchannels", "+@all"},
}

// TestReleaseWhenPublishIsDenied: a holder whose Redis user may not publish
// still releases, hands the lock to the next waiter (who learns of it by
// polling), and counts a latch down to zero. The scripts wrote the grant and
// then failed on PUBLISH: Unlock and Release returned an error, their
// leases were reported lost although the release had landed, and the last
// CountDown failed although it had counted.
func TestReleaseWhenPublishIsDenied(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for user, rules := range pubsubDenied {
		t.Run(user, func(t *testing.T) {
			c := newACLClient(t, srv, user, rules)
			other := newClient(t, srv)
			ctx := testCtx(t)

			kinds := []struct {
				kind  string
				queue string
				hold  func() (release func() error, l *dlock.Lease)
				wait  func(context.Context) error
			}{
				{"Mutex", "dlock:{" + user + "-m}:q",
					func() (func() error, *dlock.Lease) {
						l := mustLock(t, c, user+"-m")
						return func() error { return l.Unlock(ctx) }, l
					},
					func(ctx context.Context) error {
						l, err := other.Mutex(user + "-m").Lock(ctx)
						return unlockIf(ctx, l, err)
					}},
				{"RWMutex", "dlock:{" + user + "-rw}:rw:q",
					func() (func() error, *dlock.Lease) {
						l, err := c.RWMutex(user + "-rw").Lock(ctx)
						if err != nil {
							t.Fatal(err)
						}
						return func() error { return l.Unlock(ctx) }, l
					},
					func(ctx context.Context) error {
						l, err := other.RWMutex(user + "-rw").RLock(ctx)
						return unlockIf(ctx, l, err)
					}},
				{"Semaphore", "dlock:{" + user + "-sem}:sem:q",
					func() (func() error, *dlock.Lease) {
						p, err := c.Semaphore(user+"-sem", 1).Acquire(ctx, 1)
						if err != nil {
							t.Fatal(err)
						}
						return func() error { return p.Release(ctx) }, dlock.PermitsLease(p)
					},
					func(ctx context.Context) error {
						p, err := other.Semaphore(user+"-sem", 1).Acquire(ctx, 1)
						if err != nil {
							return err
						}
						return p.Release(ctx)
					}},
			}
			for _, k := range kinds {
				release, l := k.hold()
				waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
				waited := make(chan error, 1)
				go func() { waited <- k.wait(waitCtx) }()
				waitFor(t, 10*time.Second, func() bool {
					n, _ := srv.Do(t, "ZCARD", k.queue).(int64)
					return n == 1
				}, k.kind+" waiter queued")
				if err := release(); err != nil {
					t.Errorf("%s: release with a waiter: %v", k.kind, err)
				}
				if err := l.Err(); errors.Is(err, dlock.ErrLockLost) {
					t.Errorf("%s: after the release, Err = %v; want no loss", k.kind, err)
				}
				if err := <-waited; err != nil {
					t.Errorf("%s: the waiter: %v", k.kind, err)
				}
				cancel()
			}

			latch := c.Latch(user + "-latch")
			if ok, err := latch.TrySetCount(ctx, 1); !ok || err != nil {
				t.Fatalf("TrySetCount = %v, %v", ok, err)
			}
			if err := latch.CountDown(ctx); err != nil {
				t.Errorf("the last CountDown: %v", err)
			}
			if n, err := other.Latch(user + "-latch").Count(ctx); n != 0 || err != nil {
				t.Errorf("Count after the last CountDown = %d, %v; want 0", n, err)
			}
		})
	}
}

// TestACLDeniedFailsAtOnce: a Redis user that may not run dlock's scripts,
// or not on dlock's keys, gets the server's NOPERM reply from the first
// call, at once: a Lock does not retry it until its deadline, and nothing
// reads it as contention. With WithKeyPrefix matching the user's key
// pattern, the same user takes the lock.
func TestACLDeniedFailsAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	users := map[string][]any{
		"no-scripts": {"~*", "&*", "+@all", "-evalsha", "-eval"},
		"app-keys":   {"~app:*", "&app:*", "+@all"},
	}
	for user, rules := range users {
		t.Run(user, func(t *testing.T) {
			rdb := aclClient(t, srv, user, rules...)
			c, err := dlock.New(rdb)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			ctx := testCtx(t)
			waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			calls := map[string]func() error{
				"TryLock":    func() error { _, err := c.Mutex("x").TryLock(ctx); return err },
				"Lock":       func() error { _, err := c.Mutex("x").Lock(waitCtx); return err },
				"Acquire":    func() error { _, err := c.Semaphore("x", 1).Acquire(waitCtx, 1); return err },
				"Latch.Wait": func() error { return c.Latch("x").Wait(waitCtx) },
			}
			for op, call := range calls {
				start := time.Now()
				err := call()
				var rerr *driver.ReplyError
				switch took := time.Since(start); {
				case errors.Is(err, dlock.ErrNotObtained):
					t.Errorf("%s: %v: matches ErrNotObtained; want the refusal alone", op, err)
				case !errors.As(err, &rerr) || !strings.HasPrefix(rerr.Msg, "NOPERM"):
					t.Errorf("%s: %v; want the server's NOPERM reply", op, err)
				case !strings.Contains(err.Error(), "ACL rules"):
					t.Errorf("%s: %v: the error does not say what to do", op, err)
				case took > 5*time.Second:
					t.Errorf("%s: returned after %v; want at once", op, took)
				}
			}
			if user != "app-keys" {
				return
			}
			app, err := dlock.New(rdb, dlock.WithKeyPrefix("app:"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = app.Close() })
			l, err := app.Mutex("x").TryLock(ctx)
			if err == nil {
				err = l.Unlock(ctx)
			}
			if err != nil {
				t.Errorf("with WithKeyPrefix(\"app:\"): %v", err)
			}
		})
	}
}

// TestACLDeniedInsideAScriptSaysWhatToDo: a user that may run dlock's
// scripts but not a command one of them runs (here INCR, which issues the
// fencing token) gets an error that points at the ACL rules. Redis words
// that refusal without NOPERM ("ERR The user executing the script can't
// run this command or subcommand script: ..." in 7.0, "ERR ACL failure in
// script: ..." in 7.2, and after "ERR Error running script" in 6), so the
// hint, which looked for NOPERM, was left out.
func TestACLDeniedInsideAScriptSaysWhatToDo(t *testing.T) {
	srv := redistest.Start(t)
	c := newACLClient(t, srv, "no-incr", []any{"~*", "&*", "+@all", "-incr"})
	_, err := c.Mutex("x").TryLock(testCtx(t))
	var rerr *driver.ReplyError
	switch {
	case !errors.As(err, &rerr):
		t.Fatalf("TryLock: %v; want the server's refusal", err)
	case errors.Is(err, dlock.ErrKeyConflict), errors.Is(err, dlock.ErrNotObtained):
		t.Fatalf("TryLock: %v; want the refusal alone", err)
	case !strings.Contains(err.Error(), "ACL rules"):
		t.Errorf("TryLock: %v: the error does not say what to do", err)
	}
}

// TestWaitWithoutPubSubPollsAndWarns: a waiter whose Redis user may not
// subscribe logs that it waits by polling, and gets the lock when it is
// released.
func TestWaitWithoutPubSubPollsAndWarns(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for user, rules := range pubsubDenied {
		t.Run(user, func(t *testing.T) {
			h := &blockingHandler{}
			c := newACLClient(t, srv, user, rules, dlock.WithLogger(slog.New(h)))
			other := newClient(t, srv)
			ctx := testCtx(t)
			name := user + "-polls"
			held := mustLock(t, other, name)
			waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			got := make(chan error, 1)
			go func() {
				l, err := c.Mutex(name).Lock(waitCtx)
				got <- unlockIf(ctx, l, err)
			}()
			waitFor(t, 10*time.Second, func() bool {
				_, ok := h.find("dlock: cannot subscribe; waiting by polling")
				return ok
			}, "the warning")
			if err := held.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Errorf("the polling waiter: %v", err)
			}
		})
	}
}
