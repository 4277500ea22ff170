package dlock_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestRedlockOneNodeDown(t *testing.T) {
	t.Parallel()
	servers := redistest.StartNodes(t, 3)
	// A node timeout a loaded machine meets under -race, within the
	// validity of this short TTL: a live node's release misses 100ms
	// there, and Unlock then fails with ErrQuorum.
	r := newRedlock(t, addrsOf(servers), dlock.WithTTL(600*time.Millisecond), dlock.WithNodeTimeout(250*time.Millisecond))
	servers[2].Kill()
	ctx := testCtx(t)
	name := t.Name()
	start := time.Now()
	lease, err := r.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with 1 of 3 nodes down: %v", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("TryLock took %v", d)
	}
	// Renewals keep it for several TTLs on the two live nodes.
	time.Sleep(1500 * time.Millisecond)
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost with a quorum up: %v", err)
	}
	if d, err := lease.TTL(ctx); err != nil || d <= 0 {
		t.Errorf("TTL() = %v, %v", d, err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Errorf("Unlock with 1 of 3 nodes down: %v", err)
	}
	wantNoKey(t, servers, lockKey(name))
	if err := r.Do(ctx, name, func(context.Context) error { return nil }); err != nil {
		t.Errorf("Do with 1 of 3 nodes down: %v", err)
	}
}

func TestRedlockQuorumDownFailsFastAndCleanly(t *testing.T) {
	t.Parallel()
	servers := redistest.StartNodes(t, 3)
	// go-redis retries a refused dial for a while: a dead node shows as a
	// node timeout. The live node's give-back is bounded by it too, so it
	// is one a loaded machine meets under -race (it misses 50ms, and the
	// share then stays until its TTL).
	const nodeTimeout = 500 * time.Millisecond
	r := newRedlock(t, addrsOf(servers), dlock.WithNodeTimeout(nodeTimeout), dlock.WithRetryDelay(5*time.Millisecond, 20*time.Millisecond))
	servers[0].Kill()
	servers[2].Kill()
	ctx := testCtx(t)
	name := t.Name()

	start := time.Now()
	_, err := r.Mutex(name).TryLock(ctx)
	took := time.Since(start)
	if !errors.Is(err, dlock.ErrQuorum) || errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock with 2 of 3 nodes down: got %v, want ErrQuorum only", err)
	}
	if took > nodeTimeout+500*time.Millisecond {
		t.Errorf("TryLock took %v to fail", took)
	}
	nes := nodeErrorsIn(err)
	if len(nes) != 2 || nes[0].Addr != servers[0].Addr() || nes[1].Addr != servers[2].Addr() {
		t.Errorf("node errors %v, want the two dead nodes", nes)
	}
	var ne *dlock.NodeError
	if !errors.As(err, &ne) || ne.Err == nil {
		t.Errorf("errors.As(*NodeError) failed on %v", err)
	}
	wantNoKey(t, servers, lockKey(name)) // the live node's share was given back

	short, cancel := context.WithTimeout(ctx, 4*nodeTimeout) // a few attempts
	defer cancel()
	_, err = r.Mutex(name).Lock(short)
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, dlock.ErrQuorum) {
		t.Errorf("Lock until its deadline with 2 of 3 down: got %v, want ErrNotObtained, DeadlineExceeded and ErrQuorum", err)
	}
	waitNoKey(t, servers, lockKey(name)) // given back in the background
}

func TestRedlockBlackholedNodes(t *testing.T) {
	t.Parallel()
	servers := redistest.StartNodes(t, 3)
	proxies, addrs := proxied(t, servers)
	const nodeTimeout = 300 * time.Millisecond
	r := newRedlock(t, addrs, dlock.WithNodeTimeout(nodeTimeout))
	ctx := testCtx(t)
	name := t.Name()

	// One node blackholed: a quorum answers at once, so TryLock does not
	// wait for the node timeout.
	proxies[1].Blackhole(true)
	start := time.Now()
	lease, err := r.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with 1 of 3 blackholed: %v", err)
	}
	if d := time.Since(start); d >= nodeTimeout {
		t.Errorf("TryLock took %v: it waited for the blackholed node", d)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with 1 of 3 blackholed: %v", err)
	}
	wantNoKey(t, servers, lockKey(name))

	// Two blackholed: ErrQuorum at the node timeout, each a timeout.
	proxies[2].Blackhole(true)
	start = time.Now()
	_, err = r.Mutex(name).TryLock(ctx)
	took := time.Since(start)
	if !errors.Is(err, dlock.ErrQuorum) || errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock with 2 of 3 blackholed: got %v, want ErrQuorum", err)
	}
	if took < nodeTimeout || took > 3*nodeTimeout+300*time.Millisecond {
		t.Errorf("TryLock failed after %v, want about the node timeout (%v) plus the release's", took, nodeTimeout)
	}
	nes := nodeErrorsIn(err)
	if len(nes) != 2 {
		t.Fatalf("node errors %v, want 2", nes)
	}
	for _, ne := range nes {
		if !errors.Is(ne, os.ErrDeadlineExceeded) || errors.Is(ne, context.DeadlineExceeded) {
			t.Errorf("%v: want a node timeout (os.ErrDeadlineExceeded), not a context error", ne)
		}
	}
	wantNoKey(t, servers, lockKey(name))
}

// TestRedlockLockReturnsAtItsDeadline: a Lock whose ctx ends while an
// attempt waits for unreachable nodes returns then, not once the attempt's
// requests have settled (go-redis keeps dialling a node that refuses
// connections past a context's end), and its share on the node that
// answered is given back in the background.
func TestRedlockLockReturnsAtItsDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// Ports 1 and 2 of the loopback refuse connections: nothing listens
	// there (tcpmux and its neighbour are not run on any test machine).
	r := newRedlock(t, []string{srv.Addr(), "127.0.0.1:1", "127.0.0.1:2"}, dlock.WithNodeTimeout(3*time.Second))
	name := t.Name()
	for _, d := range []time.Duration{300 * time.Millisecond, time.Second} {
		ctx, cancel := context.WithTimeout(testCtx(t), d)
		start := time.Now()
		_, err := r.Mutex(name).Lock(ctx)
		took := time.Since(start)
		cancel()
		if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock with 2 of 3 nodes refusing connections: got %v, want ErrNotObtained and DeadlineExceeded", err)
		}
		if took > d+700*time.Millisecond {
			t.Errorf("Lock with a deadline of %v returned after %v", d, took)
		}
	}
	waitFor(t, 10*time.Second, func() bool {
		return srv.Client(t).Exists(context.Background(), lockKey(name)).Val() == 0
	}, "the share on the reachable node to be given back")
}

// TestRedlockDefaultClientsStillTimeOut checks the node timeout with
// go-redis's default options, which ignore context deadlines.
func TestRedlockDefaultClientsStillTimeOut(t *testing.T) {
	t.Parallel()
	servers := redistest.StartNodes(t, 3)
	proxies, addrs := proxied(t, servers)
	nodes := make([]dlock.RedisClient, len(addrs))
	for i, addr := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		nodes[i] = rdb
	}
	r, err := dlock.NewRedlock(nodes, dlock.WithNodeTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := testCtx(t)
	proxies[0].Blackhole(true)
	proxies[1].Blackhole(true)
	start := time.Now()
	_, err = r.Mutex(t.Name()).TryLock(ctx)
	if !errors.Is(err, dlock.ErrQuorum) {
		t.Fatalf("got %v, want ErrQuorum", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("TryLock took %v with a 100ms node timeout", d)
	}
	wantNoKey(t, servers, lockKey(t.Name()))
	// The requests into the blackhole end when their connections do.
	proxies[0].Close()
	proxies[1].Close()
}

func TestRedlockPausedNodeDoesNotDelayAcquire(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	const nodeTimeout = 400 * time.Millisecond
	r := newRedlock(t, addrsOf(servers), dlock.WithNodeTimeout(nodeTimeout))
	ctx := testCtx(t)
	servers[0].Pause()
	start := time.Now()
	lease, err := r.Mutex(t.Name()).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with 1 of 3 paused: %v", err)
	}
	if d := time.Since(start); d >= nodeTimeout {
		t.Errorf("TryLock took %v: it waited for the paused node", d)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Errorf("Unlock with 1 of 3 paused: %v", err)
	}
	servers[0].Resume()
}

// TestRedlockContentionVersusOutage checks which error wins when some nodes
// are held by another owner and others are down.
func TestRedlockContentionVersusOutage(t *testing.T) {
	t.Parallel()
	servers := redistest.StartNodes(t, 5)
	r := newRedlock(t, addrsOf(servers))
	ctx := testCtx(t)
	key := lockKey(t.Name())

	// 1 down, 2 held, 2 ours: enough nodes answered (4 of 5) that only the
	// other owner kept us from a quorum.
	servers[0].Kill()
	servers[1].Do(t, "SET", key, "someone-else", "PX", 30000)
	servers[2].Do(t, "SET", key, "someone-else", "PX", 30000)
	_, err := r.Mutex(t.Name()).TryLock(ctx)
	if !errors.Is(err, dlock.ErrNotObtained) || errors.Is(err, dlock.ErrQuorum) {
		t.Fatalf("contention with one node down: got %v, want ErrNotObtained", err)
	}
	var ne *dlock.NodeError
	if !errors.As(err, &ne) || ne.Addr != servers[0].Addr() {
		t.Errorf("the dead node is not reported: %v", err)
	}

	// 3 down, 1 held, 1 ours: fewer than a quorum answered, so even a free
	// lock could not have been taken.
	servers[1].Kill()
	servers[3].Kill()
	_, err = r.Mutex(t.Name()).TryLock(ctx)
	if !errors.Is(err, dlock.ErrQuorum) || errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("3 of 5 down: got %v, want ErrQuorum", err)
	}
	if n := len(nodeErrorsIn(err)); n != 3 {
		t.Errorf("%d node errors, want 3 (nodes 0, 1 and 3): %v", n, err)
	}
	if vals := holdersOf(t, servers, key); vals[2] != "someone-else" || vals[4] != "" {
		t.Errorf("after the failed attempt: %q, want the other owner's key intact and ours given back", vals)
	}
}

func TestRedlockLossWhenQuorumDeleted(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	const ttl = 600 * time.Millisecond
	r := newRedlock(t, addrsOf(servers), dlock.WithTTL(ttl), dlock.WithNodeTimeout(100*time.Millisecond))
	ctx := testCtx(t)
	name := t.Name()
	lease, err := r.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitAllHold(t, servers, lockKey(name))
	// One node alone is not a loss.
	servers[0].Do(t, "DEL", lockKey(name))
	time.Sleep(ttl / 2)
	if err := lease.Err(); err != nil {
		t.Fatalf("lost with a quorum still held: %v", err)
	}
	servers[1].Do(t, "DEL", lockKey(name))
	waitDone(t, lease, ttl)
	if err := lease.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Err() = %v, want ErrLockLost", err)
	}
	if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock after the loss: got %v, want ErrNotHeld", err)
	}
	wantNoKey(t, servers, lockKey(name))
}

func TestRedlockExtendAndTTLSeeQuorumLoss(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	r := newRedlock(t, addrsOf(servers), dlock.WithAutoRenew(false))
	ctx := testCtx(t)
	name := t.Name()
	lease := tryLockOnEveryNode(ctx, t, r, servers, name)
	servers[0].Do(t, "DEL", lockKey(name))
	servers[2].Do(t, "SET", lockKey(name), "someone-else", "PX", 30000)
	if _, err := lease.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("TTL: got %v, want ErrNotHeld", err)
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Err() after TTL saw the loss: %v", err)
	}

	lease2 := tryLockOnEveryNode(ctx, t, r, servers, name+"2")
	servers[0].Do(t, "DEL", lockKey(name+"2"))
	servers[1].Do(t, "DEL", lockKey(name+"2"))
	if err := lease2.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend: got %v, want ErrNotHeld", err)
	}
	for i, s := range servers[:2] {
		if got := s.Do(t, "EXISTS", lockKey(name+"2")); got != int64(0) {
			t.Errorf("Extend re-created the key on node %d", i)
		}
	}
	_ = lease2.Unlock(ctx)
}

func TestRedlockLossWhenNodesUnreachable(t *testing.T) {
	t.Parallel()
	servers := redistest.StartNodes(t, 3)
	proxies, addrs := proxied(t, servers)
	const ttl = 500 * time.Millisecond
	r := newRedlock(t, addrs, dlock.WithTTL(ttl), dlock.WithNodeTimeout(50*time.Millisecond))
	ctx := testCtx(t)
	lease, err := r.Mutex(t.Name()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proxies[0].Blackhole(true)
	proxies[2].Blackhole(true)
	// The last renewal, at the latest just before the blackhole, gives
	// validity until its start + TTL − drift: Done closes by then.
	waited := waitDone(t, lease, ttl+300*time.Millisecond)
	if waited > ttl+100*time.Millisecond {
		t.Errorf("loss signalled %v after the nodes became unreachable, past the validity deadline (TTL %v)", waited, ttl)
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrLockLost) || !strings.Contains(err.Error(), "validity deadline") {
		t.Errorf("Err() = %v, want ErrLockLost at the validity deadline", err)
	}
	proxies[0].Close()
	proxies[2].Close()
}

// TestRedlockCloseReturnsWithinTheReleaseTimeoutOnASilentNode: a node
// request to a silent node, on a client whose reads never time out, never
// ends by itself; Close must still return within the release timeout and
// say why.
func TestRedlockCloseReturnsWithinTheReleaseTimeoutOnASilentNode(t *testing.T) {
	t.Parallel()
	const release = time.Second
	proxies, addrs := proxied(t, redistest.StartNodes(t, 3))
	nodes := make([]dlock.RedisClient, len(addrs))
	for i, addr := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -1, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		nodes[i] = rdb
	}
	r, err := dlock.NewRedlock(nodes, dlock.WithReleaseTimeout(release), dlock.WithNodeTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	proxies[2].Blackhole(true)
	defer func() {
		proxies[2].Blackhole(false)
		proxies[2].ResetAll() // ends the request Close left behind
	}()
	lease, err := r.Mutex(t.Name()).TryLock(ctx) // node 2's share waits for ever
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = r.Close()
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "read timeout") {
		t.Errorf("Close with a request left on a silent node: got %v, want DeadlineExceeded and the reason", err)
	}
	if took < release/2 || took > 3*release {
		t.Errorf("Close returned after %v, want about the release timeout (%v)", took, release)
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("lease after Close: Err() = %v, want ErrLockLost", err)
	}
}
