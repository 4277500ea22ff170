package goredis

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/keyslot"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestShardedSubscriptionClosesWhileTheMasterStops is the conformance
// suite's RunCloseWhileTheServerStops for the sharded subscription of a
// Cluster, which that suite (a standalone server) does not reach: the
// master of the channel's slot drops the subscription's connection, and
// stops (SIGSTOP) once go-redis has connected to it again, so the
// reconnection hangs in its handshake, which no context ends, while holding
// the PubSub's lock. (Stopped before the connect, the dial would end at
// Close, which cancels it.) Close must return at once all the same, call
// the Handler no more, and what it leaves behind must end once the master
// answers again: no pub/sub connection stays open, and goleak (TestMain)
// finds no goroutine left.
func TestShardedSubscriptionClosesWhileTheMasterStops(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	ch := "{" + t.Name() + "}"
	master := cl.MasterForSlot(t, keyslot.Of(ch))

	stall := &stallingDial{master: master, killed: make(chan struct{}), paused: make(chan struct{})}
	cc := stall.client(cl)
	t.Cleanup(func() { _ = cc.Close() })
	d := New(cc)
	t.Cleanup(func() { _ = d.Close() })

	h := &countingHandler{}
	sub := d.Subscribe(h)
	t.Cleanup(func() { _ = sub.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sub.Subscribe(ctx, ch); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if cmd := d.PublishCommand(); cmd != "SPUBLISH" {
		t.Fatalf("the Cluster driver publishes with %s, want sharded pub/sub (Redis 7)", cmd)
	}

	defer master.Resume() // the cleanups would resume it too, after closing the clients
	stall.arm()
	func() {
		defer close(stall.killed) // also when Do fails t
		master.Do(t, "CLIENT", "KILL", "TYPE", "pubsub")
	}()
	select {
	case <-stall.paused:
	case <-time.After(10 * time.Second):
		t.Fatalf("the subscription did not dial %s again within 10 s", master.Addr())
	}

	checkCallsReturnAtDeadline(t, sub, ch)

	start := time.Now()
	if err := sub.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if elapsed := time.Since(start); elapsed >= time.Second {
		t.Errorf("Close took %v with the master stopped mid-reconnection; want it prompt", elapsed)
	}
	h.closed.Store(true)
	master.Resume()

	// The reconnection Close abandoned finishes, and its connection is
	// closed by the goroutine Close left for it.
	deadline := time.Now().Add(30 * time.Second)
	for n := pubsubClients(t, master); n != 0; n = pubsubClients(t, master) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still has %d pub/sub connections 30 s after Close", master.Addr(), n)
		}
		time.Sleep(20 * time.Millisecond) // polling the server: nothing to wait on
	}
	if n := h.late.Load(); n != 0 {
		t.Errorf("the Handler was called %d times after Close returned", n)
	}
}

// stallingDial is a Cluster client's dialer that, once armed, stops master
// after the next connection to it, once killed is closed: after CLIENT
// KILL has returned, since a master stopped earlier would hold back that
// reply. It closes paused then.
type stallingDial struct {
	master         *redistest.Server
	killed, paused chan struct{}

	mu    sync.Mutex
	armed bool
}

// client returns a client of cl that dials through d, with timeouts longer
// than go-redis's defaults: waiting for them cannot pass for prompt.
func (d *stallingDial) client(cl *redistest.Cluster) *redis.ClusterClient {
	const timeout = 10 * time.Second
	dialer := &net.Dialer{Timeout: timeout}
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Addrs(),
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			fire := d.take(addr)
			conn, err := dialer.DialContext(ctx, network, addr)
			if fire {
				<-d.killed
				d.master.Pause()
				close(d.paused)
			}
			return conn, err
		},
		DialTimeout:  timeout,
		ReadTimeout:  timeout,
		WriteTimeout: timeout,
	})
}

func (d *stallingDial) arm() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.armed = true
}

// take reports whether a dial of addr is the one to stop the master after,
// disarming d.
func (d *stallingDial) take(addr string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	fire := d.armed && addr == d.master.Addr()
	if fire {
		d.armed = false
	}
	return fire
}

// checkCallsReturnAtDeadline checks that, while the master is stopped
// mid-reconnection, a caller's Subscribe (a channel of ch's slot) and
// Unsubscribe return at their deadline, not when go-redis gives up on the
// reconnection, which holds the PubSub's lock.
func checkCallsReturnAtDeadline(t *testing.T, sub driver.Subscription, ch string) {
	t.Helper()
	for _, call := range []struct {
		name string
		do   func(context.Context) error
	}{
		{"Subscribe", func(ctx context.Context) error { return sub.Subscribe(ctx, ch+"2") }},
		{"Unsubscribe", func(ctx context.Context) error { return sub.Unsubscribe(ctx, ch) }},
	} {
		const deadline = 200 * time.Millisecond
		cctx, ccancel := context.WithTimeout(context.Background(), deadline)
		start := time.Now()
		err := call.do(cctx)
		elapsed := time.Since(start)
		ccancel()
		if elapsed >= time.Second {
			t.Errorf("%s with a %v deadline took %v (%v) with the master stopped mid-reconnection; want it back at its deadline",
				call.name, deadline, elapsed, err)
		}
	}
}

// pubsubClients returns how many pub/sub connections srv has.
func pubsubClients(t testing.TB, srv *redistest.Server) int {
	t.Helper()
	list, _ := srv.Do(t, "CLIENT", "LIST", "TYPE", "pubsub").(string)
	n := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.TrimSpace(line) != "" {
			n++
		}
	}
	return n
}

// countingHandler is a driver.Handler that counts its calls after closed
// is set.
type countingHandler struct {
	closed atomic.Bool
	late   atomic.Int32
}

func (h *countingHandler) Message(string, string) {
	if h.closed.Load() {
		h.late.Add(1)
	}
}

func (h *countingHandler) Reset() {
	if h.closed.Load() {
		h.late.Add(1)
	}
}

// The sharded subscription's SUNSUBSCRIBE whose caller left before it
// could be sent (another call held the connection's gate) must still reach
// the master: as with a plain subscription
// (TestUnsubscribeNeverSentIsSentByTheLoop), the channel stayed subscribed
// there for the connection's life.
func TestShardedUnsubscribeNeverSentIsSentByTheLoop(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	cc := cl.Client(t)
	d := New(cc)
	t.Cleanup(func() { _ = d.Close() })
	conns := captureConns(d)
	sub := d.Subscribe(&countingHandler{})
	t.Cleanup(func() { _ = sub.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ch := "{" + t.Name() + "}"
	if err := sub.Subscribe(ctx, ch); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if cmd := d.PublishCommand(); cmd != "SPUBLISH" {
		t.Skipf("the servers have no sharded pub/sub (%s)", cmd)
	}
	master := cl.MasterForSlot(t, keyslot.Of(ch)).Client(t)
	numSub := func() int64 {
		v, err := master.Do(ctx, "PUBSUB", "SHARDNUMSUB", ch).Slice()
		if err != nil || len(v) != 2 {
			t.Fatalf("PUBSUB SHARDNUMSUB: %v %v", v, err)
		}
		return v[1].(int64)
	}
	if n := numSub(); n != 1 {
		t.Fatalf("%d subscribers after Subscribe, want 1", n)
	}
	unsubscribeGivenUp(t, ctx, sub, <-conns, ch, numSub)
}
