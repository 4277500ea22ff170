package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// A give-back of a failed attempt can reach its node long after the attempt:
// here its bytes wait in a lagging proxy, as a pipeline of the driver's
// batching, sent without a deadline, waits for a node that comes back. It
// must not delete the share of a later attempt of the same Lock, which then
// believes it holds a quorum while another client takes the lock.
//
// Two of three nodes lag while X's Lock makes its first attempt: they do not
// answer within the node timeout, and the attempt's give-backs to them go
// into the lag. Once the client has given up on a give-back to each, the lag
// ends; X's next attempt is granted on every node, and the failed attempt's
// requests arrive one lag after they were sent. X's shares must survive
// them: every node keeps X's value and Y cannot take the lock, until X
// unlocks, which leaves no key behind (a late grant was given back after it
// arrived).
func TestRedlockLateGiveBackKeepsLaterGrant(t *testing.T) {
	t.Parallel()
	const lag = 2 * time.Second
	servers := redistest.StartNodes(t, 3)
	proxies, addrs := proxied(t, servers)
	opts := []dlock.Option{
		dlock.WithTTL(30 * time.Second), // no renewal while the test looks
		dlock.WithNodeTimeout(100 * time.Millisecond),
		dlock.WithRetryDelay(200*time.Millisecond, 300*time.Millisecond),
	}
	ctx := testCtx(t)
	name := t.Name()
	x, clients := newRedlockWithScripts(ctx, t, addrs, name+"-before", opts)
	gaveUp := make(chan int, 64) // the lagging node of each give-back the client gave up on
	for i, rdb := range clients[:2] {
		// Connections set up already: a new one's handshake would be
		// stuck in the lag, and its commands never written.
		warmConns(t, rdb, 4)
		rdb.AddHook(giveUpHook(i, gaveUp))
	}

	proxies[0].SetLatency(lag)
	proxies[1].SetLatency(lag)
	type result struct {
		l   *dlock.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := x.Mutex(name).Lock(ctx)
		done <- result{l, err}
	}()
	var sent time.Time // when the client gave up on the first give-back into the lag
	for seen := map[int]bool{}; len(seen) < 2; {
		select {
		case i := <-gaveUp:
			if sent.IsZero() {
				sent = time.Now()
			}
			seen[i] = true
		case r := <-done:
			t.Fatalf("Lock returned (%v, %v) while two of three nodes lag", r.l, r.err)
		case <-time.After(10 * time.Second):
			t.Fatal("no give-back to the lagging nodes within 10s")
		}
	}
	lagEnds := time.Now()
	proxies[0].SetLatency(0)
	proxies[1].SetLatency(0)
	r := <-done
	if r.err != nil {
		t.Fatalf("Lock: %v", r.err)
	}
	lx := r.l
	defer func() {
		if err := lx.Unlock(context.Background()); err != nil {
			t.Errorf("Unlock: %v", err)
		}
		wantNoKey(t, servers, lockKey(name))
	}()
	if since := time.Since(sent); since > lag-500*time.Millisecond {
		t.Skipf("the grant came %v after the first give-back went into the lag of %v: too late to tell", since, lag)
	}
	waitAllHold(t, servers, lockKey(name))

	// Whatever went into the lag has arrived by lagEnds+lag.
	checkSharesKept(ctx, t, servers, name, lx, lagEnds.Add(lag+time.Second), opts)
}

// newRedlockWithScripts returns a Redlock with opts over go-redis clients
// of addrs, with a short read timeout and no retries: pipelines of the
// driver's batching have no deadline, and would hold a lagging node's
// client for seconds and resend their commands. It loads the scripts on
// every node first by locking warmName, as long-running nodes know them:
// a late EVALSHA would otherwise find none and do nothing.
func newRedlockWithScripts(ctx context.Context, t *testing.T, addrs []string, warmName string, opts []dlock.Option) (*dlock.Redlock, []*redis.Client) {
	clients := make([]*redis.Client, len(addrs))
	nodes := make([]dlock.RedisClient, len(addrs))
	for i, addr := range addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true,
			ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
		t.Cleanup(func() { _ = clients[i].Close() })
		nodes[i] = clients[i]
	}
	x, err := dlock.NewRedlock(nodes, opts...)
	if err != nil {
		t.Fatalf("NewRedlock: %v", err)
	}
	t.Cleanup(func() { _ = x.Close() })
	// A Redlock of its own on the same clients loads the scripts, with
	// time to dial and fall back to EVAL that a short node timeout does
	// not leave on a loaded machine.
	warm, err := dlock.NewRedlock(nodes, dlock.WithNodeTimeout(10*time.Second))
	if err != nil {
		t.Fatalf("NewRedlock: %v", err)
	}
	t.Cleanup(func() { _ = warm.Close() })
	l, err := warm.Mutex(warmName).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	return x, clients
}

// checkSharesKept fails t if, until until, a node's key of name holds
// anything but lx's value while lx is valid, and if then another Redlock
// with opts can take name.
func checkSharesKept(ctx context.Context, t *testing.T, servers []*redistest.Server, name string, lx *dlock.Lease, until time.Time, opts []dlock.Option) {
	for ; time.Now().Before(until); time.Sleep(20 * time.Millisecond) {
		if err := lx.Err(); err != nil {
			t.Fatalf("X's lease was lost: %v", err)
		}
		vals := holdersOf(t, servers, lockKey(name))
		for i, v := range vals {
			if id, _, _ := strings.Cut(v, ";"); id != lx.Owner() {
				y := newRedlock(t, addrsOf(servers), opts...)
				ly, yerr := y.Mutex(name).TryLock(ctx)
				if yerr == nil {
					_ = ly.Unlock(context.Background())
				}
				t.Fatalf("node %d lost X's share while X's lease is valid (keys now %q); Y's TryLock: %v",
					i, vals, errOrTaken(yerr))
			}
		}
	}
	// Y waits for every node's answer: a node timeout on a loaded machine
	// would read as ErrQuorum, not as the refusal this checks for.
	y := newRedlock(t, addrsOf(servers), append(opts, dlock.WithNodeTimeout(10*time.Second))...)
	if ly, err := y.Mutex(name).TryLock(ctx); err == nil {
		_ = ly.Unlock(context.Background())
		t.Fatal("Y took the Redlock while X's lease is valid")
	} else if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Y's TryLock: %v, want ErrNotObtained", err)
	}
}

func errOrTaken(err error) string {
	if err == nil {
		return "granted: two holders"
	}
	return err.Error()
}

// warmConns leaves n connections set up in rdb's pool: n held at once, each
// used once, then given back.
func warmConns(t testing.TB, rdb *redis.Client, n int) {
	t.Helper()
	conns := make([]*redis.Conn, n)
	for i := range conns {
		conns[i] = rdb.Conn()
		if err := conns[i].Ping(context.Background()).Err(); err != nil {
			t.Fatalf("warming a connection: %v", err)
		}
	}
	for _, c := range conns {
		_ = c.Close()
	}
	if idle := rdb.PoolStats().IdleConns; int(idle) < n {
		t.Fatalf("%d idle connections after warming, want %d", idle, n)
	}
}

// giveUpHook reports each owned_release (a Redlock give-back or release)
// that its client gave up on: sent into a lag, it arrives later.
func giveUpHook(node int, gaveUp chan<- int) afterCmd {
	return func(cmd redis.Cmder, err error) {
		args := cmd.Args()
		if err == nil || errors.Is(err, redis.Nil) || len(args) < 2 ||
			fmt.Sprint(args[0]) != "evalsha" || fmt.Sprint(args[1]) != scripts.OwnedRelease.Hash() {
			return
		}
		select {
		case gaveUp <- node:
		default:
		}
	}
}

// startRedlockLock starts a Lock of r on name; its outcome comes on the channel.
func startRedlockLock(ctx context.Context, r *dlock.Redlock, name string) <-chan leaseOrError {
	got := make(chan leaseOrError, 1)
	go func() {
		l, err := r.Mutex(name).Lock(ctx)
		got <- leaseOrError{l, err}
	}()
	return got
}

// newHookedRedlock is newRedlock whose node clients report on replies
// every reply they receive to a redlock_acquire.
func newHookedRedlock(t testing.TB, addrs []string, replies chan<- acquireReply, opts ...dlock.Option) *dlock.Redlock {
	t.Helper()
	clients := redlockNodeClients(t, addrs, nil)
	for i, rdb := range clients {
		rdb.AddHook(acquireReplyHook(i, replies))
	}
	return newRedlockOn(t, clients, opts...)
}

// acquireReply is a reply a node's client received to a redlock_acquire
// of key by owner.
type acquireReply struct {
	node       int
	key, owner string
}

// acquireReplyHook reports the replies its node's client receives to
// redlock_acquire, dropping them when nobody reads.
func acquireReplyHook(node int, replies chan<- acquireReply) afterCmd {
	return func(cmd redis.Cmder, err error) {
		args := cmd.Args()
		if err != nil || len(args) < 5 || fmt.Sprint(args[0]) != "evalsha" ||
			fmt.Sprint(args[1]) != scripts.RedlockAcquire.Hash() {
			return
		}
		// The owner value is the first argument after the keys.
		numKeys, _ := strconv.Atoi(fmt.Sprint(args[2]))
		if len(args) < 4+numKeys {
			return
		}
		select {
		case replies <- acquireReply{node: node, key: scriptKey(cmd), owner: fmt.Sprint(args[3+numKeys])}:
		default:
		}
	}
}
