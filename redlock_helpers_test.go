package dlock_test

import (
	"context"
	"slices"
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
// once a quorum granted it, and the other nodes' shares land a moment later,
// or, on a loaded machine, seconds later. Only a share that never lands
// fails it, so its bound only bounds a hang.
func waitAllHold(t testing.TB, servers []*redistest.Server, key string) {
	t.Helper()
	waitFor(t, 10*time.Second, func() bool {
		return !slices.Contains(holdersOf(t, servers, key), "")
	}, "every node's share of "+key)
}

// waitNoKey waits until no live server holds key: a Lock that its ctx
// ended gives back what its last attempt took in the background.
func waitNoKey(t testing.TB, servers []*redistest.Server, key string) {
	t.Helper()
	waitFor(t, 10*time.Second, func() bool {
		for _, v := range holdersOf(t, servers, key) {
			if v != "" && v != "(down)" {
				return false
			}
		}
		return true
	}, "no live node to hold "+key)
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
