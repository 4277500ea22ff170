package conformance

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
)

// testClusterRoutes sends one Run with calls on several slots, half of them
// asking for WAIT, with a script no node has yet, then checks that a
// subscription on the Cluster hears what a script publishes with the
// driver's PublishCommand.
func testClusterRoutes(t *testing.T, newDriver NewDriverFunc) {
	cl := redistest.StartCluster(t, 3, 1)
	d := newDriver(t, Target{Addrs: cl.Addrs(), Cluster: true})
	rdb := cl.Client(t)
	ctx := testCtx(t)
	// dlock groups the keys of multi-name operations by slot only when the
	// driver says the deployment is sharded.
	if s, ok := d.(driver.Sharded); !ok || !s.Sharded() {
		t.Errorf("a driver over a Cluster does not report driver.Sharded")
	}
	incr := newScript(t, `return redis.call('INCR', KEYS[1])`)

	var calls []*driver.Call
	for i := 0; i < 8; i++ {
		c := &driver.Call{Script: incr, Keys: []string{key(t, strconv.Itoa(i))}}
		if i%2 == 0 {
			c.Replicas, c.ReplicaTimeout = 1, 5*time.Second
		}
		calls = append(calls, c)
	}
	masters := map[string]bool{}
	for _, c := range calls {
		masters[cl.MasterForSlot(t, redistest.KeySlot(c.Keys[0])).Addr()] = true
	}
	if len(masters) < 2 {
		t.Fatalf("the keys all map to one master; the test needs several")
	}
	d.Run(ctx, calls...)
	for i, c := range calls {
		wantAcked := 0
		if c.Replicas > 0 {
			wantAcked = 1
		}
		if c.Err != nil || c.Reply != int64(1) || c.Acked != wantAcked {
			t.Errorf("call %d: Reply, Acked, Err = %#v, %d, %v; want 1, %d, nil", i, c.Reply, c.Acked, c.Err, wantAcked)
		}
		if n := rdb.Get(ctx, c.Keys[0]).Val(); n != "1" {
			t.Errorf("call %d ran %s times, want once", i, n)
		}
	}

	rec := newRecorder()
	sub := d.Subscribe(rec)
	defer sub.Close()
	ch := key(t, "channel")
	if err := sub.Subscribe(ctx, ch); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	// A script publishing with the driver's PublishCommand, as dlock's do
	// (on the channel named like a key of its slot), reaches subscribers:
	// PUBLISH, broadcast to every node, or SPUBLISH, which only the
	// slot's nodes deliver.
	pub := newScript(t, `return redis.call(ARGV[1], KEYS[1], ARGV[2])`)
	c := &driver.Call{Script: pub, Keys: []string{ch}, Args: []any{d.PublishCommand(), "hello"}}
	d.Run(ctx, c)
	if c.Err != nil {
		t.Fatalf("%s from a script: %v", d.PublishCommand(), c.Err)
	}
	rec.expect(t, ch, "hello")
}

// testRunReturnsAtTheDeadline silences the server behind a proxy: Run must
// give up at ctx's deadline, pipelined, dedicated (WAIT) and single calls
// alike, and by then ctx must say so, so callers can tell a deadline from a
// failure of Redis.
func testRunReturnsAtTheDeadline(t *testing.T, newDriver NewDriverFunc) {
	srv := redistest.Shared(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	d := newDriver(t, Target{Addrs: []string{proxy.Addr()}, Password: srv.Password()})
	incr := newScript(t, `return redis.call('INCR', KEYS[1])`)
	k := key(t, "k")
	own(t, inspector(t, srv), k)
	warmup := &driver.Call{Script: incr, Keys: []string{k}}
	d.Run(testCtx(t), warmup) // connects and loads the script
	if warmup.Err != nil {
		t.Fatalf("warm-up: %v", warmup.Err)
	}

	proxy.Blackhole(true)
	// Ends, for the driver's Close, what the calls left behind (such as
	// the dial of a new connection) sooner than the library's timeouts.
	defer proxy.ResetAll()
	const deadline = 200 * time.Millisecond
	for _, batch := range [][]*driver.Call{
		{{Script: incr, Keys: []string{k}}},
		{{Script: incr, Keys: []string{k}}, {Script: incr, Keys: []string{k}}},
		{{Script: incr, Keys: []string{k}, Replicas: 1, ReplicaTimeout: time.Second}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		start := time.Now()
		d.Run(ctx, batch...)
		elapsed := time.Since(start)
		ctxErr := ctx.Err()
		cancel()
		if elapsed > deadline+time.Second {
			t.Errorf("Run of %d calls returned %v after a %v deadline", len(batch), elapsed, deadline)
		}
		if ctxErr == nil {
			t.Errorf("Run of %d calls returned before its context ended", len(batch))
		}
		for i, c := range batch {
			if c.Err == nil {
				t.Errorf("Run of %d calls: call %d succeeded through a blackhole: %#v", len(batch), i, c.Reply)
			}
		}
	}
}
