package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestCluster runs every primitive on one Redis Cluster of three masters
// with a replica each, started once for all its subtests (a cluster takes
// about 2 s to start): contention between two clients with a hand-off,
// sharded pub/sub, WAIT routed to each key's master, and resharding while
// locks are taken, held and released.
func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *redistest.Cluster)
	}{
		{"Mutex", testClusterMutex},
		{"FairMutex", testClusterFairMutex},
		{"ReentrantMutex", testClusterReentrantMutex},
		{"RWMutex", testClusterRWMutex},
		{"Semaphore", testClusterSemaphore},
		{"Latch", testClusterLatch},
		{"MultiLock", testMultiLockOnCluster},
		{"InspectListForceUnlock", testInspectListAndForceUnlockOnCluster},
		{"ShardedPubSub", testClusterShardedPubSub},
		{"ReplicaAck", testClusterReplicaAck},
		{"SlotMigrationDuringWait", testClusterSlotMigrationDuringWait},
		{"Resharding", testClusterResharding},
		{"SplitKeys", testClusterSplitKeys},
	} {
		tc := tc
		t.Run(tc.name, func(t *testing.T) { tc.run(t, cl) })
	}
}

// clusterClient returns a dlock Client over a go-redis cluster client of
// its own, as another process would have; both are closed when the test
// ends.
func clusterClient(t testing.TB, cl *redistest.Cluster, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatalf("dlock.New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// patient makes a waiter poll only every 10 s, so that a waiter served
// within a few seconds was woken by a message, not by its poll.
var patient = dlock.WithWaiterLease(30 * time.Second)

// promptly bounds a hand-off heard by message; generous for -race on a
// loaded machine, and still far below a patient waiter's 10 s poll.
const promptly = 4 * time.Second

// spreadNames returns one name per master, each made from base.
func spreadNames(t *testing.T, cl *redistest.Cluster, base string) []string {
	t.Helper()
	seen := map[string]bool{}
	var names []string
	for i := 0; len(names) < 3; i++ {
		if i > 100 {
			t.Fatalf("no names on three masters among 100")
		}
		name := fmt.Sprintf("%s%d", base, i)
		if m := cl.MasterForSlot(t, redistest.KeySlot(lockKey(name))).Addr(); !seen[m] {
			seen[m] = true
			names = append(names, name)
		}
	}
	return names
}

// handOff unlocks held and expects next, waiting for the lock, to get it
// promptly with a larger token.
func handOff(t *testing.T, held *dlock.Lease, next *async[*dlock.Lease]) *dlock.Lease {
	t.Helper()
	start := time.Now()
	if err := held.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	l := next.await(t, promptly, "the waiter after the release")
	t.Logf("%s: handed over in %v", held.Name(), time.Since(start).Round(time.Microsecond))
	if l.Token() <= held.Token() {
		t.Errorf("token after the hand-off %d, not above the releaser's %d", l.Token(), held.Token())
	}
	return l
}

func testClusterMutex(t *testing.T, cl *redistest.Cluster) {
	ctx := testCtx(t)
	a := clusterClient(t, cl, dlock.WithOwnerInfo("a"))
	b := clusterClient(t, cl, dlock.WithOwnerInfo("b"), patient)
	for _, name := range spreadNames(t, cl, uniqueName(t)) {
		held, err := a.Mutex(name).TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock(%q): %v", name, err)
		}
		if _, err := b.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("TryLock of a held lock: %v, want ErrNotObtained", err)
		}
		next := goLock(t, b.Mutex(name).Lock)
		waitWaiters(t, a, name, dlock.KindMutex, 1)
		l := handOff(t, held, next)
		if _, err := a.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("TryLock after the hand-off: %v, want ErrNotObtained", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	}
}

func testClusterFairMutex(t *testing.T, cl *redistest.Cluster) {
	ctx := testCtx(t)
	a := clusterClient(t, cl)
	b := clusterClient(t, cl, patient)
	name := uniqueName(t)
	held, err := a.FairMutex(name).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	first := goLock(t, b.FairMutex(name).Lock)
	waitWaiters(t, a, name, dlock.KindMutex, 1)
	second := goLock(t, b.FairMutex(name).Lock) // same client: a place of its own
	waitWaiters(t, a, name, dlock.KindMutex, 2)
	l := handOff(t, held, first)
	if !second.pending() {
		t.Errorf("the second waiter got the lock with the first")
	}
	handOff(t, l, second)
}

func testClusterReentrantMutex(t *testing.T, cl *redistest.Cluster) {
	ctx := testCtx(t)
	a := clusterClient(t, cl)
	b := clusterClient(t, cl, patient)
	name := uniqueName(t)
	ctxA := dlock.WithOwner(ctx, "job-a")
	outer, err := a.ReentrantMutex(name).Lock(ctxA)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	inner, err := a.ReentrantMutex(name).TryLock(ctxA)
	if err != nil {
		t.Fatalf("nested TryLock: %v", err)
	}
	if n, err := a.ReentrantMutex(name).HoldCount(ctxA); n != 2 || err != nil {
		t.Errorf("HoldCount = %d, %v; want 2", n, err)
	}
	next := goLock(t, func(ctx context.Context) (*dlock.Lease, error) {
		return b.ReentrantMutex(name).Lock(dlock.WithOwner(ctx, "job-b"))
	})
	waitWaiters(t, a, name, dlock.KindReentrant, 1)
	if err := inner.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the nested hold: %v", err)
	}
	if _, err := b.ReentrantMutex(name).TryLock(dlock.WithOwner(ctx, "job-c")); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("TryLock with the outer hold left: %v, want ErrNotObtained", err)
	}
	handOff(t, outer, next)
}

func testClusterRWMutex(t *testing.T, cl *redistest.Cluster) {
	ctx := testCtx(t)
	a := clusterClient(t, cl)
	b := clusterClient(t, cl, patient)
	name := uniqueName(t)
	r1, err := a.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatalf("RLock: %v", err)
	}
	r2, err := b.RWMutex(name).TryRLock(ctx)
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	writer := goLock(t, b.RWMutex(name).Lock)
	waitWaiters(t, a, name, dlock.KindRWMutex, 1)
	if _, err := a.RWMutex(name).TryRLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("a reader while a writer waits: %v, want ErrNotObtained", err)
	}
	if err := r2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	w := handOff(t, r1, writer)
	reader := goLock(t, a.RWMutex(name, patient).RLock)
	waitWaiters(t, a, name, dlock.KindRWMutex, 1)
	start := time.Now()
	r, err := b.RWMutex(name).Downgrade(ctx, w)
	if err != nil {
		t.Fatalf("Downgrade: %v", err)
	}
	other := reader.await(t, promptly, "the reader queued behind the downgraded writer")
	t.Logf("reader granted %v after the downgrade", time.Since(start).Round(time.Microsecond))
	for _, l := range []*dlock.Lease{r, other} {
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	}
}

func testClusterSemaphore(t *testing.T, cl *redistest.Cluster) {
	ctx := testCtx(t)
	a := clusterClient(t, cl)
	b := clusterClient(t, cl, patient)
	name := uniqueName(t)
	held, err := a.Semaphore(name, 2).Acquire(ctx, 2)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	next := goAcquire(t, func(ctx context.Context) (*dlock.Permits, error) { return b.Semaphore(name, 2).Acquire(ctx, 1) }, releasePermits)
	waitWaiters(t, a, name, dlock.KindSemaphore, 1)
	if _, err := b.Semaphore(name, 2).TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("TryAcquire with every permit held: %v, want ErrNotObtained", err)
	}
	start := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	p := next.await(t, promptly, "the waiter after the release")
	t.Logf("permits handed over in %v", time.Since(start).Round(time.Microsecond))
	if n, err := a.Semaphore(name, 2).Available(ctx); n != 1 || err != nil {
		t.Errorf("Available = %d, %v; want 1", n, err)
	}

	// AddPermits and ReleaseN serve waiters the same way (AddPermits's
	// script touches its calls key too, in the same slot).
	big := goAcquire(t, func(ctx context.Context) (*dlock.Permits, error) { return b.Semaphore(name, 2).Acquire(ctx, 2) }, releasePermits)
	waitWaiters(t, a, name, dlock.KindSemaphore, 1)
	if n, err := a.Semaphore(name, 2).AddPermits(ctx, 2); n != 4 || err != nil {
		t.Fatalf("AddPermits(2) = %d, %v; want 4", n, err)
	}
	q := big.await(t, promptly, "the waiter for 2 after the limit was raised to 4")
	next = goAcquire(t, func(ctx context.Context) (*dlock.Permits, error) { return b.Semaphore(name, 2).Acquire(ctx, 2) }, releasePermits)
	waitWaiters(t, a, name, dlock.KindSemaphore, 1)
	if err := q.ReleaseN(ctx, 1); err != nil {
		t.Fatalf("ReleaseN(1) of 2: %v", err)
	}
	r := next.await(t, promptly, "the waiter for 2 after ReleaseN")
	if q.N() != 1 || q.Err() != nil {
		t.Errorf("after ReleaseN(1) of 2: N() = %d, Err() = %v", q.N(), q.Err())
	}
	for _, p := range []*dlock.Permits{p, q, r} {
		if err := p.Release(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
	}
}

func testClusterLatch(t *testing.T, cl *redistest.Cluster) {
	ctx := testCtx(t)
	a := clusterClient(t, cl)
	b := clusterClient(t, cl, patient)
	name := uniqueName(t)
	if ok, err := a.Latch(name).TrySetCount(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetCount = %v, %v", ok, err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Latch(name).Wait(ctx) }()
	waitShardSubscribers(t, cl, latchKey(name), 1)
	for i := 0; i < 2; i++ {
		if err := a.Latch(name).CountDown(ctx); err != nil {
			t.Fatalf("CountDown: %v", err)
		}
	}
	start := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
		t.Logf("waiter released %v after the last CountDown", time.Since(start).Round(time.Microsecond))
	case <-time.After(promptly):
		t.Fatalf("Wait did not return within %v of the last CountDown", promptly)
	}
}

// shardSubscribers returns how many clients are subscribed to channel with
// SSUBSCRIBE and with SUBSCRIBE on srv.
func shardSubscribers(t testing.TB, srv *redistest.Server, channel string) (sharded, plain int64) {
	t.Helper()
	count := func(v any) int64 {
		list, _ := v.([]any)
		if len(list) != 2 {
			t.Fatalf("PUBSUB reply %#v", v)
		}
		n, _ := list[1].(int64)
		return n
	}
	return count(srv.Do(t, "PUBSUB", "SHARDNUMSUB", channel)), count(srv.Do(t, "PUBSUB", "NUMSUB", channel))
}

// waitShardSubscribers waits until the master that serves channel counts
// n sharded subscribers of it.
func waitShardSubscribers(t testing.TB, cl *redistest.Cluster, channel string, n int64) {
	t.Helper()
	waitFor(t, 10*time.Second, func() bool {
		sharded, _ := shardSubscribers(t, cl.MasterForSlot(t, redistest.KeySlot(channel)), channel)
		return sharded == n
	}, fmt.Sprintf("%d sharded subscribers of %q", n, channel))
}

// testClusterShardedPubSub checks that waiters subscribe with SSUBSCRIBE at
// the master of their lock's slot (and nowhere with SUBSCRIBE), and that a
// release reaches them by SPUBLISH: a patient waiter (polling every 10 s)
// is served promptly only if the message arrives.
func testClusterShardedPubSub(t *testing.T, cl *redistest.Cluster) {
	ctx := testCtx(t)
	a := clusterClient(t, cl)
	b := clusterClient(t, cl, patient)
	for _, name := range spreadNames(t, cl, uniqueName(t)) {
		held := mustLock(t, a, name)
		next := goLock(t, b.Mutex(name).Lock)
		waitShardSubscribers(t, cl, lockKey(name), 1)
		for _, m := range cl.Masters(t) {
			sharded, plain := shardSubscribers(t, m, lockKey(name))
			if plain != 0 {
				t.Errorf("%s: %d plain subscribers of %q on %s, want 0", name, plain, lockKey(name), m.Addr())
			}
			if owner := cl.MasterForSlot(t, redistest.KeySlot(lockKey(name))); m != owner && sharded != 0 {
				t.Errorf("%s: %d sharded subscribers on %s, which does not serve its slot", name, sharded, m.Addr())
			}
		}
		l := handOff(t, held, next)
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	}
}
