package conformance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
)

// The suite inspects Redis with go-redis clients of the harness, never with
// the client under test, so a broken driver cannot hide its own mistakes.

// lockName returns a lock name unique to the test (t.Name() has slashes,
// which are fine in a name), with an optional suffix.
func lockName(t testing.TB, suffix ...string) string {
	return t.Name() + strings.Join(suffix, "")
}

// lockKey is the key of the lock called name under the default prefix.
func lockKey(name string) string { return "dlock:{" + name + "}" }

// testCtx returns a context that ends well after anything a test needs.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustLock takes name on c or fails the test.
func mustLock(t testing.TB, c *dlock.Client, name string, opts ...dlock.Option) *dlock.Lease {
	t.Helper()
	l, err := c.Mutex(name, opts...).Lock(testCtx(t))
	if err != nil {
		t.Fatalf("Lock(%q): %v", name, err)
	}
	return l
}

// mustUnlock releases l or fails the test.
func mustUnlock(t testing.TB, l *dlock.Lease) {
	t.Helper()
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock(%q): %v", l.Name(), err)
	}
}

// own deletes keys that a test writes by itself, now and when it ends, so
// the test starts afresh under -count and leaves the shared server clean.
func own(t testing.TB, rdb *redis.Client, keys ...string) {
	t.Helper()
	if err := rdb.Del(context.Background(), keys...).Err(); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	t.Cleanup(func() { rdb.Del(context.Background(), keys...) })
}

// waitFor polls cond until it holds, failing after limit.
func waitFor(t testing.TB, limit time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitQueued waits until n owners are queued for name: the waiters made
// their first attempt.
func waitQueued(t testing.TB, rdb *redis.Client, name string, n int64) {
	t.Helper()
	waitFor(t, 10*time.Second, func() bool {
		return rdb.ZCard(context.Background(), lockKey(name)+":q").Val() == n
	}, fmt.Sprintf("%d waiters queued on %q", n, name))
}

// waitDone waits for a lease's Done channel, failing after limit.
func waitDone(t testing.TB, l *dlock.Lease, limit time.Duration) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(limit):
		t.Fatalf("lease of %q still not done after %v", l.Name(), limit)
	}
}

// lockResult is the outcome of a Lock run in a goroutine.
type lockResult struct {
	lease *dlock.Lease
	err   error
	at    time.Time
}

// lockAsync starts Lock on m in a goroutine; the result arrives on the
// returned channel.
func lockAsync(ctx context.Context, m *dlock.Mutex) <-chan lockResult {
	got := make(chan lockResult, 1)
	go func() {
		l, err := m.Lock(ctx)
		got <- lockResult{l, err, time.Now()}
	}()
	return got
}

// leftovers counts the keys of the lock called name that still exist.
func leftovers(t testing.TB, rdb *redis.Client, name string) int64 {
	t.Helper()
	k := lockKey(name)
	n, err := rdb.Exists(context.Background(), k, k+":q", k+":w").Result()
	if err != nil {
		t.Fatalf("EXISTS: %v", err)
	}
	return n
}

// clientOver returns a Client over d, as the adapters' New does, closed by
// t's cleanup.
func clientOver(t testing.TB, d driver.Driver, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.NewWithDriver(d, opts...)
	if err != nil {
		t.Fatalf("dlock.NewWithDriver: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// inspector returns a go-redis client on srv, closed by t's cleanup, to check
// what the client under test did.
func inspector(t testing.TB, srv *redistest.Server) *redis.Client { return srv.Client(t) }
