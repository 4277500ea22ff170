package conformance

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
)

// DialFunc makes a TCP connection to addr with d, the dialer of the library
// under test (or a net.Dialer with the timeout, for a library that has
// none), and runs the test's hooks around it.
type DialFunc func(ctx context.Context, d *net.Dialer, addr string) (net.Conn, error)

// NewDialingDriverFunc returns a driver.Driver over a new client of the
// library under test, connected to target, that makes every connection
// (its pub/sub connections included) with dial, and gives each connection
// timeout to connect and to finish its handshake. It registers the
// client's Close with t.Cleanup and fails t when it cannot build the
// client.
type NewDialingDriverFunc func(t testing.TB, target Target, dial DialFunc, timeout time.Duration) driver.Driver

// releaseTimeout is the Client's in the tests of Close.
const releaseTimeout = time.Second

// dialTimeout is longer than the libraries' default (5 s), so that a Close
// that waits for the dial cannot pass for a prompt one.
const dialTimeout = 10 * time.Second

// RunCloseWhileTheServerStops checks, as parallel subtests of t, that a
// Client and a driver.Subscription close at once when the server stops
// (SIGSTOP) while the pub/sub connection is being replaced: at its dial or
// at its SUBSCRIBE, through the DialFunc that newDriver's client must use.
// Close waits neither for a dial or handshake without a context (rueidis,
// valkey-go) nor for the driver's subscribe timeout. TestMain must call
// redistest.Main, whose goleak check catches goroutines left behind.
func RunCloseWhileTheServerStops(t *testing.T, newDriver NewDialingDriverFunc) {
	for _, at := range []string{"dial", "subscribe"} {
		at := at
		t.Run("Client at "+at, func(t *testing.T) {
			t.Parallel()
			testClientCloseWhileTheServerStops(t, newDriver, at)
		})
		t.Run("Subscription at "+at, func(t *testing.T) {
			t.Parallel()
			testSubscriptionCloseWhileTheServerStops(t, newDriver, at)
		})
		t.Run("Subscribe at "+at, func(t *testing.T) {
			t.Parallel()
			testSubscribeWhileTheServerStops(t, newDriver, at)
		})
	}
}

func testClientCloseWhileTheServerStops(t *testing.T, newDriver NewDialingDriverFunc, at string) {
	srv := redistest.Start(t) // it is paused: not the shared server
	ctx := testCtx(t)
	p := newPauser(srv, at)
	c := clientOver(t, p.driver(t, newDriver), dlock.WithReleaseTimeout(releaseTimeout))
	holder := clientOver(t, newDriver(t, target(srv), dialTCP, dialTimeout))

	// c waits for a held Mutex, which subscribes it to the lock's channel,
	// and gets the lock handed over by pub/sub.
	name := lockName(t)
	lease := mustLock(t, holder, name)
	got := make(chan error, 1)
	go func() {
		l, err := c.Mutex(name).Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	waitFor(t, 10*time.Second, func() bool {
		infos, err := holder.Inspect(ctx, name)
		return err == nil && len(infos) == 1 && len(infos[0].Waiters) == 1
	}, "the waiter to queue")
	mustUnlock(t, lease)
	if err := <-got; err != nil {
		t.Fatalf("waiter's Lock and Unlock: %v", err)
	}

	defer srv.Resume() // before the cleanups, which close clients of srv
	p.stopServerWhileReplacing(t)
	start := time.Now()
	err := c.Close()
	elapsed := time.Since(start)
	// Close gives up on what is still running at the release timeout, and
	// says so: the subscription must not be among it.
	if err != nil || elapsed >= releaseTimeout {
		t.Errorf("Close with the server stopped mid-subscription: %v after %v; want nil well within the release timeout (%v)",
			err, elapsed, releaseTimeout)
	}
}

func testSubscriptionCloseWhileTheServerStops(t *testing.T, newDriver NewDialingDriverFunc, at string) {
	srv := redistest.Start(t) // it is paused: not the shared server
	p := newPauser(srv, at)
	sub := p.driver(t, newDriver).Subscribe(newRecorder())
	t.Cleanup(func() { _ = sub.Close() })
	if err := sub.Subscribe(testCtx(t), key(t, "channel")); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}

	defer srv.Resume()
	p.stopServerWhileReplacing(t)
	start := time.Now()
	_ = sub.Close()
	if elapsed := time.Since(start); elapsed >= releaseTimeout {
		t.Errorf("Subscription.Close took %v with the server stopped mid-subscription; want it prompt", elapsed)
	}
}

// callTimeout is the context's deadline of the Subscribe and Unsubscribe
// calls made while the server is stopped: they must return by it, give or
// take a busy machine, not at the library's timeouts.
const callTimeout = 200 * time.Millisecond

// testSubscribeWhileTheServerStops checks that a caller's Subscribe and
// Unsubscribe return at their context's deadline while the connection is
// being replaced and the server does not answer: a Lock that starts
// waiting then must not overrun its own deadline.
func testSubscribeWhileTheServerStops(t *testing.T, newDriver NewDialingDriverFunc, at string) {
	srv := redistest.Start(t) // it is paused: not the shared server
	p := newPauser(srv, at)
	sub := p.driver(t, newDriver).Subscribe(newRecorder())
	t.Cleanup(func() { _ = sub.Close() })
	first := key(t, "channel")
	if err := sub.Subscribe(testCtx(t), first); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}

	defer srv.Resume()
	p.stopServerWhileReplacing(t)
	for _, call := range []struct {
		name string
		do   func(context.Context) error
	}{
		{"Subscribe", func(ctx context.Context) error { return sub.Subscribe(ctx, key(t, "another")) }},
		{"Unsubscribe", func(ctx context.Context) error { return sub.Unsubscribe(ctx, first) }},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		start := time.Now()
		err := call.do(ctx)
		elapsed := time.Since(start)
		cancel()
		if elapsed >= releaseTimeout {
			t.Errorf("%s with a %v deadline took %v (%v) with the server stopped mid-subscription; want it back at its deadline",
				call.name, callTimeout, elapsed, err)
		}
		if call.name == "Subscribe" && err == nil {
			t.Errorf("Subscribe with the server stopped: nil error; want one (the server cannot have confirmed it)")
		}
	}
}

// dialTCP is a DialFunc without hooks.
func dialTCP(ctx context.Context, d *net.Dialer, addr string) (net.Conn, error) {
	return d.DialContext(ctx, "tcp", addr)
}

// pauser pauses a server once armed, from within the connections of the
// client under test: at the dial of the next connection, or when a
// SUBSCRIBE is written.
type pauser struct {
	srv    *redistest.Server
	at     string // "dial" or "subscribe"
	mu     sync.Mutex
	armed  bool
	killed chan struct{} // closed once CLIENT KILL returned, or failed
	killOK bool          // set before killed is closed
	paused chan struct{} // closed once the server is paused
}

func newPauser(srv *redistest.Server, at string) *pauser {
	return &pauser{srv: srv, at: at, killed: make(chan struct{}), paused: make(chan struct{})}
}

// driver returns a driver from newDriver on the server whose connections go
// through p.
func (p *pauser) driver(t testing.TB, newDriver NewDialingDriverFunc) driver.Driver {
	t.Helper()
	return newDriver(t, target(p.srv), p.dial, dialTimeout)
}

// stopServerWhileReplacing cuts the pub/sub connections of the server and
// returns once the server is paused at p's point of their replacement.
func (p *pauser) stopServerWhileReplacing(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	p.armed = true
	p.mu.Unlock()
	func() {
		defer close(p.killed) // also when Do fails t
		p.srv.Do(t, "CLIENT", "KILL", "TYPE", "pubsub")
		p.killOK = true
	}()
	select {
	case <-p.paused:
	case <-time.After(10 * time.Second):
		t.Fatalf("the pub/sub connection was not replaced (no %s) within 10 s", p.at)
	}
}

// pause pauses the server the first time it is called after arm, once
// CLIENT KILL returned: the server drops the killed connections, and the
// client under test may reach p's point, before it writes the reply to
// CLIENT KILL, which a pause would then hold back. The client waits here
// meanwhile, so the server still stops at p's point.
func (p *pauser) pause() {
	p.mu.Lock()
	armed := p.armed
	p.armed = false
	p.mu.Unlock()
	if !armed {
		return
	}
	<-p.killed
	if p.killOK {
		p.srv.Pause()
		close(p.paused)
	}
}

// dial is the DialFunc of the client under test: a plain TCP dial, then or
// before it pausing the server.
func (p *pauser) dial(ctx context.Context, d *net.Dialer, addr string) (net.Conn, error) {
	if p.at == "dial" {
		p.pause() // the kernel still accepts the connection; the handshake hangs
	}
	conn, err := dialTCP(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	return &pausingConn{Conn: conn, p: p}, nil
}

// subscribeCmd is how SUBSCRIBE starts in RESP (UNSUBSCRIBE does not
// match), in upper case: libraries differ (go-redis writes "subscribe").
var subscribeCmd = []byte("\r\nSUBSCRIBE\r\n")

// pausingConn pauses the server before writing a SUBSCRIBE, when its pauser
// is for that.
type pausingConn struct {
	net.Conn
	p *pauser
}

func (c *pausingConn) Write(b []byte) (int, error) {
	if c.p.at == "subscribe" && bytes.Contains(bytes.ToUpper(b), subscribeCmd) {
		c.p.pause()
	}
	return c.Conn.Write(b)
}
