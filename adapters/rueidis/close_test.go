package dlockrueidis_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/dlock-go/dlock"
	dlockrueidis "github.com/dlock-go/dlock/adapters/rueidis"
	"github.com/dlock-go/dlock/internal/conformance"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestCloseWhileTheServerStopsMidSubscription: a Client whose pub/sub
// connection is being replaced when the server stops (SIGSTOP) closes at
// once, its subscription included, without leaving the subscription's
// goroutine to the release timeout. rueidis dials, and sends its handshake,
// without a context, and the driver subscribes the new connection with a
// timeout of its own: Close must wait for neither. The server stops at a
// known point of the replacement: when the new connection is dialed, or
// when its SUBSCRIBE is written.
func TestCloseWhileTheServerStopsMidSubscription(t *testing.T) {
	for _, at := range []string{"dial", "subscribe"} {
		at := at
		t.Run("Client at "+at, func(t *testing.T) {
			t.Parallel()
			testClientCloseWhileTheServerStops(t, at)
		})
		t.Run("Subscription at "+at, func(t *testing.T) {
			t.Parallel()
			testSubscriptionCloseWhileTheServerStops(t, at)
		})
	}
}

// releaseTimeout is the Client's in the tests of Close.
const releaseTimeout = time.Second

func testClientCloseWhileTheServerStops(t *testing.T, at string) {
	srv := redistest.Start(t) // it is paused: not the shared server
	ctx := testCtx(t)
	pauser := newPauser(srv, at)
	c, err := dlockrueidis.New(pauser.client(t), dlock.WithReleaseTimeout(releaseTimeout))
	if err != nil {
		t.Fatalf("dlockrueidis.New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	holder := newClient(t, conformance.Target{Addrs: []string{srv.Addr()}})

	// c waits for a held Mutex, which subscribes it to the lock's channel,
	// and gets the lock handed over by pub/sub.
	name := t.Name()
	lease, err := holder.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatalf("holder's Lock: %v", err)
	}
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
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("holder's Unlock: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter's Lock and Unlock: %v", err)
	}

	defer srv.Resume() // before the cleanups, which close clients of srv
	pauser.stopServerWhileReplacing(t)
	start := time.Now()
	err = c.Close()
	elapsed := time.Since(start)
	// Close gives up on what is still running at the release timeout, and
	// says so: the subscription must not be among it.
	if err != nil || elapsed >= releaseTimeout {
		t.Errorf("Close with the server stopped mid-subscription: %v after %v; want nil well within the release timeout (%v)",
			err, elapsed, releaseTimeout)
	}
	// Leaked goroutines are caught by goleak in TestMain, once the server
	// resumed and the driver's helper finished with the connection.
}

func testSubscriptionCloseWhileTheServerStops(t *testing.T, at string) {
	srv := redistest.Start(t) // it is paused: not the shared server
	pauser := newPauser(srv, at)
	sub := dlockrueidis.NewDriver(pauser.client(t)).Subscribe(nopHandler{})
	t.Cleanup(func() { _ = sub.Close() })
	if err := sub.Subscribe(testCtx(t), "{"+t.Name()+"}"); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}

	defer srv.Resume()
	pauser.stopServerWhileReplacing(t)
	start := time.Now()
	_ = sub.Close()
	if elapsed := time.Since(start); elapsed >= releaseTimeout {
		t.Errorf("Subscription.Close took %v with the server stopped mid-subscription; want it prompt", elapsed)
	}
}

// pauser pauses a server once armed, from within the connections of a
// rueidis client: at the dial of the next connection, or when a SUBSCRIBE
// is written.
type pauser struct {
	srv    *redistest.Server
	at     string // "dial" or "subscribe"
	mu     sync.Mutex
	armed  bool
	paused chan struct{} // closed once the server is paused
}

func newPauser(srv *redistest.Server, at string) *pauser {
	return &pauser{srv: srv, at: at, paused: make(chan struct{})}
}

// client returns a rueidis client of the server whose connections go
// through p, closed by t's cleanup.
func (p *pauser) client(t testing.TB) rueidis.Client {
	t.Helper()
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{p.srv.Addr()},
		DialCtxFn:   p.dial,
		// Longer than rueidis's default (5 s), so that a Close that waits
		// for the dial cannot pass for a prompt one.
		Dialer: net.Dialer{Timeout: 10 * time.Second},
	})
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(client.Close)
	return client
}

// stopServerWhileReplacing cuts the pub/sub connections of the server and
// returns once the server is paused at p's point of their replacement.
func (p *pauser) stopServerWhileReplacing(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	p.armed = true
	p.mu.Unlock()
	p.srv.Do(t, "CLIENT", "KILL", "TYPE", "pubsub")
	select {
	case <-p.paused:
	case <-time.After(10 * time.Second):
		t.Fatalf("the pub/sub connection was not replaced (no %s) within 10 s", p.at)
	}
}

// pause pauses the server the first time it is called after arm.
func (p *pauser) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.armed {
		p.armed = false
		p.srv.Pause()
		close(p.paused)
	}
}

// dial is rueidis's DialCtxFn: a plain TCP dial, then or before it pausing
// the server.
func (p *pauser) dial(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
	if p.at == "dial" {
		p.pause() // the kernel still accepts the connection; the handshake hangs
	}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &pausingConn{Conn: conn, p: p}, nil
}

// subscribeCmd is how SUBSCRIBE starts in RESP (UNSUBSCRIBE does not match).
var subscribeCmd = []byte("\r\nSUBSCRIBE\r\n")

// pausingConn pauses the server before writing a SUBSCRIBE, when its pauser
// is for that.
type pausingConn struct {
	net.Conn
	p *pauser
}

func (c *pausingConn) Write(b []byte) (int, error) {
	if c.p.at == "subscribe" && bytes.Contains(b, subscribeCmd) {
		c.p.pause()
	}
	return c.Conn.Write(b)
}

// testCtx returns a context that ends well after anything a test needs.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newClient returns a dlock Client over a new rueidis client for target,
// both closed by t's cleanup.
func newClient(t testing.TB, target conformance.Target, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlockrueidis.New(newRueidis(t, target), opts...)
	if err != nil {
		t.Fatalf("dlockrueidis.New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
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
