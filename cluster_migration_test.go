package dlock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestClusterMigrationBlocksUntilItEnds starts the migration of a held
// lock's slot and moves no key. Redis refuses the lock's scripts with
// TRYAGAIN meanwhile: they name keys that do not exist (the waiters' queue,
// ...), and during a migration a multi-key command with a missing key is
// refused (TRYAGAIN from the source, which has the lock's key). Calls must
// keep trying until their context ends rather than give up after a few
// seconds: an Unlock (release timeout 10 s) and a Lock that starts during
// the migration are kept waiting for 6 s, longer than a fixed number of
// retries would last (16 rounds: about 4 s in all), and both succeed once
// it completes.
func TestClusterMigrationBlocksUntilItEnds(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	ctx := testCtx(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	refused := newFailureSignal(func(_ redis.Cmder, err error) bool { return strings.HasPrefix(err.Error(), "TRYAGAIN") })
	rdb.AddHook(refused)
	a, err := dlock.New(rdb, dlock.WithReleaseTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	b := clusterClient(t, cl)

	name := uniqueName(t)
	held := mustLock(t, a, name)
	slot := redistest.KeySlot(lockKey(name))
	m := cl.StartMigration(t, slot, otherMaster(t, cl, slot))
	waiter := goLock(t, b.Mutex(name).Lock)
	unlocked := make(chan error, 1)
	start := time.Now()
	go func() { unlocked <- held.Unlock(ctx) }()
	select {
	case <-refused.seen:
	case err := <-unlocked:
		t.Fatalf("Unlock returned before any TRYAGAIN: %v", err)
	case <-ctx.Done():
		t.Fatal("no TRYAGAIN while the lock's slot was migrating")
	}
	// The migration lasts 6 s, which the calls must wait out.
	select {
	case err := <-unlocked:
		t.Fatalf("Unlock returned %v into the migration: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(6 * time.Second):
	}
	if !waiter.pending() {
		t.Fatalf("Lock returned during the migration: %v, %v", waiter.got, waiter.err)
	}
	m.Finish(t)
	finished := time.Now()
	select {
	case err := <-unlocked:
		if err != nil {
			t.Fatalf("Unlock across the migration: %v", err)
		}
		t.Logf("Unlock succeeded %v after the migration ended", time.Since(finished).Round(time.Millisecond))
	case <-time.After(promptly):
		t.Fatalf("Unlock still pending %v after the migration ended", promptly)
	}
	l := waiter.await(t, promptly, "the Lock begun during the migration")
	if l.Token() <= held.Token() {
		t.Errorf("token %d after the migration, not above the first holder's %d", l.Token(), held.Token())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock of the waiter's lease: %v", err)
	}
}
