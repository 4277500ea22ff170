package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// redlockNodeClient returns a go-redis client for addr with its own pool, as
// a separate process would have, honouring context deadlines as NewRedlock
// recommends. It is closed when the test ends.
func redlockNodeClient(t testing.TB, addr string) *redis.Client {
	return redlockNodeClients(t, []string{addr}, nil)[0]
}

// newRedlock returns a Redlock over fresh clients for addrs, closed when the
// test ends (before its clients).
func newRedlock(t testing.TB, addrs []string, opts ...dlock.Option) *dlock.Redlock {
	t.Helper()
	return newRedlockOn(t, redlockNodeClients(t, addrs, nil), opts...)
}

// redlockNodeClients returns a client for each of addrs, as
// redlockNodeClient makes them, with configure (if not nil) applied to
// their options first.
func redlockNodeClients(t testing.TB, addrs []string, configure func(*redis.Options)) []*redis.Client {
	clients := make([]*redis.Client, len(addrs))
	for i, addr := range addrs {
		o := &redis.Options{Addr: addr, ContextTimeoutEnabled: true}
		if configure != nil {
			configure(o)
		}
		rdb := redis.NewClient(o)
		t.Cleanup(func() { _ = rdb.Close() })
		clients[i] = rdb
	}
	return clients
}

// newRedlockOn returns a Redlock over clients, closed when the test ends
// (before its clients).
func newRedlockOn(t testing.TB, clients []*redis.Client, opts ...dlock.Option) *dlock.Redlock {
	t.Helper()
	nodes := make([]dlock.RedisClient, len(clients))
	for i, rdb := range clients {
		// Dial now: a first request that must dial and shake hands within
		// a short node timeout missed it on a loaded machine. (A node a
		// test has not started yet just fails the PING.)
		_ = rdb.Ping(context.Background()).Err()
		nodes[i] = rdb
	}
	r, err := dlock.NewRedlock(nodes, opts...)
	if err != nil {
		t.Fatalf("NewRedlock: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func addrsOf(servers []*redistest.Server) []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// proxied puts a fault-injecting proxy in front of every server.
func proxied(t testing.TB, servers []*redistest.Server) ([]*redistest.Proxy, []string) {
	proxies := make([]*redistest.Proxy, len(servers))
	addrs := make([]string, len(servers))
	for i, s := range servers {
		proxies[i] = redistest.StartProxy(t, s.Addr())
		addrs[i] = proxies[i].Addr()
	}
	return proxies, addrs
}

// holdersOf returns, for each server, the value of key ("" when absent).
func holdersOf(t testing.TB, servers []*redistest.Server, key string) []string {
	t.Helper()
	vals := make([]string, len(servers))
	for i, s := range servers {
		if !s.Running() {
			vals[i] = "(down)"
			continue
		}
		if v, ok := s.Do(t, "GET", key).(string); ok {
			vals[i] = v
		}
	}
	return vals
}

// wantNoKey fails unless key is absent from every running server.
func wantNoKey(t testing.TB, servers []*redistest.Server, key string) {
	t.Helper()
	for i, v := range holdersOf(t, servers, key) {
		if v != "" && v != "(down)" {
			t.Errorf("node %d still holds %s = %q", i, key, v)
		}
	}
}

// eventually polls cond until it returns "" or a second has passed, then
// fails with its last message. A Redlock call returns once a quorum of nodes
// answered: the others catch up a moment later.
func eventually(t testing.TB, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Error(msg)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tryLockOnEveryNode takes name with r's TryLock and waits until every
// node holds its share (waitAllHold): a share still on its way could be
// beaten by another attempt, such as a waiter's, which would then take
// that node, and give it back, instead.
func tryLockOnEveryNode(ctx context.Context, t testing.TB, r *dlock.Redlock, servers []*redistest.Server, name string) *dlock.Lease {
	t.Helper()
	l, err := r.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitAllHold(t, servers, lockKey(name))
	return l
}

// waitAllHold waits until every server holds key: an acquisition returns
// once a quorum granted it, and the other nodes' shares land a moment later.
func waitAllHold(t testing.TB, servers []*redistest.Server, key string) {
	t.Helper()
	eventually(t, func() string {
		for i, v := range holdersOf(t, servers, key) {
			if v == "" {
				return fmt.Sprintf("node %d never got its share of %s", i, key)
			}
		}
		return ""
	})
}

// waitNoKey waits until no live server holds key: a Lock that its ctx
// ended gives back what its last attempt took in the background.
func waitNoKey(t testing.TB, servers []*redistest.Server, key string) {
	t.Helper()
	eventually(t, func() string {
		for i, v := range holdersOf(t, servers, key) {
			if v != "" && v != "(down)" {
				return fmt.Sprintf("node %d still holds %s = %q", i, key, v)
			}
		}
		return ""
	})
}

// nodeErrorsIn collects every *dlock.NodeError in err's tree.
func nodeErrorsIn(err error) []*dlock.NodeError {
	var found []*dlock.NodeError
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if ne, ok := err.(*dlock.NodeError); ok {
			found = append(found, ne)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return found
}

func TestRedlockMutualExclusion(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	addrs := addrsOf(servers)
	const workers, rounds = 4, 12
	var (
		counter atomic.Int64 // read and written non-atomically below, on purpose
		inside  atomic.Int32
		wg      sync.WaitGroup
	)
	ctx := testCtx(t)
	for w := 0; w < workers; w++ {
		// One Redlock per worker, each with its own pools: separate
		// processes. The node timeout is one a loaded machine meets under
		// -race: the default for this TTL (TTL/100, 50ms) is missed there,
		// and an Unlock then leaves that node's key to its TTL, or fails
		// with ErrQuorum.
		r := newRedlock(t, addrs, dlock.WithTTL(5*time.Second), dlock.WithNodeTimeout(time.Second),
			dlock.WithRetryDelay(time.Millisecond, 10*time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := r.Mutex(t.Name())
			for i := 0; i < rounds; i++ {
				lease, err := m.Lock(ctx)
				if err != nil {
					t.Errorf("Lock: %v", err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				v := counter.Load()
				time.Sleep(time.Millisecond) // widen the window for a lost update
				counter.Store(v + 1)
				inside.Add(-1)
				if err := lease.Unlock(ctx); err != nil {
					t.Errorf("Unlock: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if got := counter.Load(); got != workers*rounds {
		t.Errorf("counter = %d, want %d: updates were lost", got, workers*rounds)
	}
	wantNoKey(t, servers, lockKey(t.Name()))
}

// TestRedlockTakesAFreeKeyWithANativeSet: an uncontended Lock takes each
// node's free key with one SET NX PX and runs no script there (a script's
// fixed cost is a large share of a lock+unlock's work per node); the Unlock's release
// script is the only one. A key held by another owner still gets the
// script, which tells the holder and its remaining time.
func TestRedlockTakesAFreeKeyWithANativeSet(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	r := newRedlock(t, addrsOf(servers))
	ctx := testCtx(t)
	name := t.Name()
	// Dial, and load the release script, before counting.
	warm, err := r.Mutex(name + "-warm").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		s.Do(t, "CONFIG", "RESETSTAT")
	}
	l, err := r.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for i, s := range servers {
		stats, _ := s.Do(t, "INFO", "commandstats").(string)
		if !strings.Contains(stats, "cmdstat_set:calls=1,") || !strings.Contains(stats, "cmdstat_evalsha:calls=1,") {
			t.Errorf("node %d: want one SET and one script (the release); commandstats:\n%s", i, stats)
		}
	}

	// Held by another owner: the attempt reports the holder's time.
	other := newRedlock(t, addrsOf(servers))
	held, err := other.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Mutex(name).TryLock(ctx)
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock of a held lock: %v, want ErrNotObtained", err)
	}
	if !strings.Contains(err.Error(), "held by another owner for") {
		t.Errorf("TryLock of a held lock: %v; want it to say how long the holder has left", err)
	}

	// Once r has waited for the lock, it still listens for its releases
	// (the subscription lingers): the lock is contended, and r asks with
	// the script at once, which answers a taken key in one round trip.
	got := startRedlockLock(ctx, r, name)
	waitUntil(t, 10*time.Second, "the waiting Lock to listen for releases", func() bool { return dlock.RedlockGateHears(r, name) })
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-got
	if res.err != nil {
		t.Fatal(res.err)
	}
	if err := res.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		s.Do(t, "CONFIG", "RESETSTAT")
	}
	if l, err = r.Mutex(name).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for i, s := range servers {
		stats, _ := s.Do(t, "INFO", "commandstats").(string)
		if !strings.Contains(stats, "cmdstat_evalsha:calls=2,") {
			t.Errorf("node %d, after a wait: want two scripts (acquire and release) and no native SET; commandstats:\n%s", i, stats)
		}
	}
}

func TestRedlockLeaseSemantics(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	r := newRedlock(t, addrsOf(servers), dlock.WithTTL(10*time.Second))
	ctx := testCtx(t)
	name := t.Name()
	m := r.Mutex(name)
	if m.Name() != name {
		t.Errorf("Name() = %q", m.Name())
	}
	lease, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	if lease.Token() != 0 {
		t.Errorf("Token() = %d, want 0: Redlock has no fencing token", lease.Token())
	}
	if lease.Name() != name || lease.Err() != nil {
		t.Errorf("Name() = %q, Err() = %v", lease.Name(), lease.Err())
	}
	// The owner value is on every node, under the Mutex's key layout.
	eventually(t, func() string {
		vals := holdersOf(t, servers, lockKey(name))
		for _, v := range vals {
			if v == "" || v != vals[0] {
				return fmt.Sprintf("the nodes hold %q, want one owner value on all", vals)
			}
		}
		return ""
	})
	if d, err := lease.TTL(ctx); err != nil || d <= 9*time.Second || d > 10*time.Second {
		t.Errorf("TTL() = %v, %v; want about 10s", d, err)
	}

	_, err = r.Mutex(name).TryLock(ctx)
	if !errors.Is(err, dlock.ErrNotObtained) || errors.Is(err, dlock.ErrQuorum) {
		t.Errorf("second TryLock: got %v, want ErrNotObtained only", err)
	}
	if !strings.Contains(err.Error(), "held by another owner") {
		t.Errorf("the error does not say how long the holder keeps it: %v", err)
	}

	if err := lease.Extend(ctx, 20*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if d, err := lease.TTL(ctx); err != nil || d <= 19*time.Second {
		t.Errorf("TTL() after Extend(20s) = %v, %v", d, err)
	}
	for i, s := range servers {
		eventually(t, func() string {
			if pttl := s.Do(t, "PTTL", lockKey(name)).(int64); pttl <= 19000 {
				return fmt.Sprintf("node %d: PTTL %d after Extend(20s)", i, pttl)
			}
			return ""
		})
	}

	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	select {
	case <-lease.Done():
	default:
		t.Error("Done is not closed after Unlock")
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Err() after Unlock = %v, want ErrNotHeld", err)
	}
	if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Unlock: got %v, want ErrNotHeld", err)
	}
	wantNoKey(t, servers, lockKey(name))
	if _, err := lease.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("TTL after Unlock: got %v, want ErrNotHeld", err)
	}
}

func TestRedlockUnlockWithCancelledContext(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	r := newRedlock(t, addrsOf(servers))
	ctx, cancel := context.WithCancel(context.Background())
	lease, err := r.Mutex(t.Name()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with a cancelled context: %v", err)
	}
	wantNoKey(t, servers, lockKey(t.Name()))

	// Not ErrNotObtained: for a TryLock that says somebody holds the lock.
	if _, err := r.Mutex(t.Name()).TryLock(ctx); errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Errorf("TryLock with a cancelled context: got %v, want context.Canceled and not ErrNotObtained", err)
	}
}

func TestRedlockLockWaitsAndTimesOut(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	addrs := addrsOf(servers)
	holderRL := newRedlock(t, addrs)
	waiterRL := newRedlock(t, addrs, dlock.WithRetryDelay(5*time.Millisecond, 20*time.Millisecond))
	ctx := testCtx(t)
	name := t.Name()
	held, err := holderRL.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}

	short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	_, err = waiterRL.Mutex(name).Lock(short)
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlock.ErrQuorum) {
		t.Fatalf("Lock on a held lock until the deadline: got %v, want ErrNotObtained and DeadlineExceeded", err)
	}

	released := make(chan time.Time, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		released <- time.Now()
		if err := held.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	}()
	lease, err := waiterRL.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	// The waiter retries at most every 20ms once its delay has grown.
	if wait := time.Since(<-released); wait > time.Second {
		t.Errorf("the waiter took the lock %v after its release", wait)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
}

func TestRedlockDo(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	r := newRedlock(t, addrsOf(servers), dlock.WithTTL(600*time.Millisecond), dlock.WithNodeTimeout(100*time.Millisecond))
	ctx := testCtx(t)
	name := t.Name()
	errFn := errors.New("fn failed")
	err := r.Do(ctx, name, func(ctx context.Context) error {
		if _, err := r.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("inside Do the lock is not held: %v", err)
		}
		return errFn
	})
	if !errors.Is(err, errFn) {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
	wantNoKey(t, servers, lockKey(name))

	if err := r.Do(ctx, name, nil); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Do(nil fn): got %v, want ErrInvalidArgument", err)
	}
	if err := r.Do(ctx, "", func(context.Context) error { return nil }); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Do with a bad name: got %v, want ErrInvalidArgument", err)
	}

	// Losing the lock (its key deleted on a quorum of nodes) cancels fn's ctx.
	err = r.Do(ctx, name, func(ctx context.Context) error {
		waitAllHold(t, servers, lockKey(name))
		servers[0].Do(t, "DEL", lockKey(name))
		servers[1].Do(t, "DEL", lockKey(name))
		select {
		case <-ctx.Done():
			if !errors.Is(context.Cause(ctx), dlock.ErrLockLost) {
				t.Errorf("fn's ctx cause = %v, want ErrLockLost", context.Cause(ctx))
			}
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("fn's ctx was not cancelled")
		}
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Do after the loss: got %v, want ErrLockLost", err)
	}
	wantNoKey(t, servers, lockKey(name)) // the minority share is released too
}

func TestRedlockLockerSwitchesBackends(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	r := newRedlock(t, addrsOf(servers))
	c := newClient(t, redistest.Shared(t))
	ctx := testCtx(t)
	for _, lk := range []dlock.Locker{c.Mutex(t.Name()), r.Mutex(t.Name())} {
		lease, err := lk.Lock(ctx)
		if err != nil {
			t.Fatalf("%T.Lock: %v", lk, err)
		}
		if _, err := lk.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("%T.TryLock while held: %v", lk, err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Errorf("%T: Unlock: %v", lk, err)
		}
	}
}

func TestRedlockHeldByAnotherOwner(t *testing.T) {
	servers := redistest.StartNodes(t, 5)
	r := newRedlock(t, addrsOf(servers))
	ctx := testCtx(t)
	key := lockKey(t.Name())

	// Another owner on 2 of 5: a quorum of 3 is still ours; its keys stay.
	for _, s := range servers[:2] {
		s.Do(t, "SET", key, "someone-else", "PX", 30000)
	}
	lease, err := r.Mutex(t.Name()).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with 2 of 5 held by another owner: %v", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	vals := holdersOf(t, servers, key)
	if vals[0] != "someone-else" || vals[1] != "someone-else" || vals[2]+vals[3]+vals[4] != "" {
		t.Fatalf("after Unlock: %q", vals)
	}

	// Another owner on 3 of 5: not obtained, and the 2 nodes we got are
	// given back.
	servers[2].Do(t, "SET", key, "someone-else", "PX", 30000)
	_, err = r.Mutex(t.Name()).TryLock(ctx)
	if !errors.Is(err, dlock.ErrNotObtained) || errors.Is(err, dlock.ErrQuorum) {
		t.Fatalf("TryLock with 3 of 5 held: got %v, want ErrNotObtained", err)
	}
	vals = holdersOf(t, servers, key)
	if vals[0]+vals[1]+vals[2] != strings.Repeat("someone-else", 3) || vals[3]+vals[4] != "" {
		t.Errorf("partial acquisition not rolled back: %q", vals)
	}
}

func TestRedlockKeyConflict(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	r := newRedlock(t, addrsOf(servers))
	ctx := testCtx(t)
	key := lockKey(t.Name())

	servers[0].Do(t, "RPUSH", key, "not a lock")
	lease, err := r.Mutex(t.Name()).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with a foreign key on 1 of 3: %v", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}

	servers[1].Do(t, "SET", key, "no expiry")
	start := time.Now()
	_, err = r.Mutex(t.Name()).Lock(ctx)
	if !errors.Is(err, dlock.ErrQuorum) || !errors.Is(err, dlock.ErrKeyConflict) {
		t.Fatalf("Lock with foreign keys on 2 of 3: got %v, want ErrQuorum and ErrKeyConflict", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Lock took %v to give up on a conflict that cannot clear", d)
	}
	if got := servers[0].Do(t, "TYPE", key); got != "list" {
		t.Errorf("the foreign list was modified: TYPE = %v", got)
	}
	if got := servers[1].Do(t, "GET", key); got != "no expiry" {
		t.Errorf("the foreign string was modified: %v", got)
	}
	if got := servers[2].Do(t, "EXISTS", key); got != int64(0) {
		t.Error("the share on the free node was not given back")
	}
}

// TestRedlockRenewalOutlivesSeveralTTLs: the watchdog keeps a Redlock
// lease held across four TTLs. The TTL leaves each renewal (a third of it,
// each node's call bounded by the node timeout) room on a loaded machine.
func TestRedlockRenewalOutlivesSeveralTTLs(t *testing.T) {
	t.Parallel()
	servers := redistest.StartNodes(t, 3)
	const ttl = time.Second
	r := newRedlock(t, addrsOf(servers), dlock.WithTTL(ttl), dlock.WithNodeTimeout(300*time.Millisecond))
	ctx := testCtx(t)
	lease, err := r.Mutex(t.Name()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * ttl)
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost while renewing: %v", err)
	}
	// A node that missed renewals under load may have let its share expire
	// (renewal never re-creates a key), but a quorum must hold it.
	held := 0
	for _, v := range holdersOf(t, servers, lockKey(t.Name())) {
		if v != "" {
			held++
		}
	}
	if held < 2 {
		t.Errorf("%d of 3 nodes hold the key of a lease that is not lost", held)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
}

func TestRedlockClose(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	addrs := addrsOf(servers)
	r := newRedlock(t, addrs)
	ctx := testCtx(t)
	lease, err := r.Mutex(t.Name()).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := r.Mutex(t.Name()).Lock(ctx)
		waiting <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waiting:
		if !errors.Is(err, dlock.ErrClosed) || !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("Lock waiting at Close: got %v, want ErrClosed and ErrNotObtained", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a waiting Lock")
	}
	waitDone(t, lease, time.Second)
	if err := lease.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("lease after Close: %v, want ErrLockLost", err)
	}
	if _, err := r.Mutex(t.Name()).TryLock(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TryLock after Close: got %v, want ErrClosed", err)
	}
	// Unlock still releases after Close.
	_ = lease.Unlock(ctx)
	wantNoKey(t, servers, lockKey(t.Name()))
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestNewRedlockRejectsBadInput(t *testing.T) {
	servers := redistest.StartNodes(t, 2)
	a, b := redlockNodeClient(t, servers[0].Addr()), redlockNodeClient(t, servers[1].Addr())
	a2 := redlockNodeClient(t, servers[0].Addr())
	var nilClient *redis.Client
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{servers[0].Addr()}})
	defer cluster.Close()
	failover := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{servers[1].Addr()}})
	defer failover.Close()
	nodes := []dlock.RedisClient{a, b}
	cases := map[string]func() error{
		"no nodes":         func() error { _, err := dlock.NewRedlock(nil); return err },
		"nil node":         func() error { _, err := dlock.NewRedlock([]dlock.RedisClient{a, nil}); return err },
		"typed nil node":   func() error { _, err := dlock.NewRedlock([]dlock.RedisClient{a, nilClient}); return err },
		"cluster node":     func() error { _, err := dlock.NewRedlock([]dlock.RedisClient{a, cluster}); return err },
		"failover node":    func() error { _, err := dlock.NewRedlock([]dlock.RedisClient{a, failover}); return err },
		"duplicate client": func() error { _, err := dlock.NewRedlock([]dlock.RedisClient{a, b, a}); return err },
		"duplicate addr":   func() error { _, err := dlock.NewRedlock([]dlock.RedisClient{a, b, a2}); return err },
		"nil option":       func() error { _, err := dlock.NewRedlock(nodes, nil); return err },
		"drift negative":   func() error { _, err := dlock.NewRedlock(nodes, dlock.WithDriftFactor(-0.1)); return err },
		"drift one":        func() error { _, err := dlock.NewRedlock(nodes, dlock.WithDriftFactor(1)); return err },
		"node timeout = TTL": func() error {
			_, err := dlock.NewRedlock(nodes, dlock.WithTTL(time.Second), dlock.WithNodeTimeout(time.Second))
			return err
		},
		"node timeout > TTL": func() error {
			_, err := dlock.NewRedlock(nodes, dlock.WithNodeTimeout(time.Minute))
			return err
		},
		"node timeout eats the validity": func() error {
			_, err := dlock.NewRedlock(nodes, dlock.WithTTL(time.Second), dlock.WithNodeTimeout(990*time.Millisecond))
			return err
		},
		"node timeout negative": func() error { _, err := dlock.NewRedlock(nodes, dlock.WithNodeTimeout(-1)); return err },
		"drift leaves nothing": func() error {
			_, err := dlock.NewRedlock(nodes, dlock.WithTTL(10*time.Millisecond), dlock.WithDriftFactor(0.9))
			return err
		},
		"retry delay inverted": func() error {
			_, err := dlock.NewRedlock(nodes, dlock.WithRetryDelay(time.Second, time.Millisecond))
			return err
		},
		"wait strategy": func() error {
			_, err := dlock.NewRedlock(nodes, dlock.WithWaitStrategy(dlock.SpinWait(time.Millisecond, time.Second)))
			return err
		},
		"wait strategy NotifyWait": func() error {
			_, err := dlock.NewRedlock(nodes, dlock.WithWaitStrategy(dlock.NotifyWait()))
			return err
		},
		"waiter lease": func() error { _, err := dlock.NewRedlock(nodes, dlock.WithWaiterLease(time.Second)); return err },
	}
	for name, f := range cases {
		if err := f(); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", name, err)
		}
	}
	// Valid edge values.
	for name, opts := range map[string][]dlock.Option{
		"drift zero":         {dlock.WithDriftFactor(0)},
		"default retry (0s)": {dlock.WithRetryDelay(0, 0)},
		"one node":           nil,
	} {
		ns := nodes
		if name == "one node" {
			ns = nodes[:1]
		}
		r, err := dlock.NewRedlock(ns, opts...)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		_ = r.Close()
	}
}

func TestRedlockOptionsRejectedElsewhere(t *testing.T) {
	srv := redistest.Shared(t)
	for name, opt := range map[string]dlock.Option{
		"WithNodeTimeout": dlock.WithNodeTimeout(time.Second),
		"WithDriftFactor": dlock.WithDriftFactor(0.1),
		"WithRetryDelay":  dlock.WithRetryDelay(time.Millisecond, time.Second),
	} {
		if _, err := dlock.New(srv.Client(t), opt); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("New(%s): got %v, want ErrInvalidArgument", name, err)
		}
		c := newClient(t, srv)
		if _, err := c.Mutex(t.Name(), opt).TryLock(testCtx(t)); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("Client.Mutex(%s): got %v, want ErrInvalidArgument", name, err)
		}
	}

	// And the queue's options on a Redlock's lock.
	servers := redistest.StartNodes(t, 3)
	r := newRedlock(t, addrsOf(servers))
	for name, opt := range map[string]dlock.Option{
		"WithWaitStrategy": dlock.WithWaitStrategy(dlock.SpinWait(time.Millisecond, time.Second)),
		"NotifyWait":       dlock.WithWaitStrategy(dlock.NotifyWait()),
		"WithWaiterLease":  dlock.WithWaiterLease(time.Second),
		"WithNodeTimeout":  dlock.WithNodeTimeout(time.Minute), // ≥ TTL
	} {
		if _, err := r.Mutex(t.Name(), opt).Lock(testCtx(t)); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("Redlock.Mutex(%s): got %v, want ErrInvalidArgument", name, err)
		}
	}
	// A shorter per-lock TTL makes the default node timeout follow (the
	// Redlock's 300ms would leave no validity): accepted, not rejected. On a
	// loaded machine 10ms may be too short for a quorum, hence ErrQuorum is
	// tolerated.
	lease, err := r.Mutex(t.Name(), dlock.WithTTL(50*time.Millisecond)).TryLock(testCtx(t))
	switch {
	case err == nil:
		_ = lease.Unlock(testCtx(t))
	case !errors.Is(err, dlock.ErrQuorum):
		t.Errorf("TryLock with a 50ms TTL: %v", err)
	}
}
