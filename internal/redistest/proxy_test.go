package redistest

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// proxied returns a client through a new proxy to a new server, with short
// timeouts and no retries so that faults surface as errors.
func proxied(t *testing.T) (*Server, *Proxy, *redis.Client) {
	t.Helper()
	return proxiedWithin(t, 300*time.Millisecond)
}

// proxiedWithin is proxied with the client's read and write timeouts.
func proxiedWithin(t *testing.T, timeout time.Duration) (*Server, *Proxy, *redis.Client) {
	t.Helper()
	s := Start(t)
	p := StartProxy(t, s.Addr())
	opt := s.Options()
	opt.Addr = p.Addr()
	opt.ReadTimeout = timeout
	opt.WriteTimeout = timeout
	opt.MaxRetries = -1
	opt.PoolSize = 1
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING through the proxy: %v", err)
	}
	return s, p, rdb
}

// TestProxyLatency: the proxy delays each chunk by its latency each way,
// pipelined chunks side by side, and SetLatency(0) removes the delay. The
// latency is long enough that the bounds hold on a loaded machine: a chunk
// queued behind another's delay, or a delay left in place, is off by a
// second or more.
func TestProxyLatency(t *testing.T) {
	t.Parallel()
	_, p, rdb := proxiedWithin(t, 30*time.Second)
	ctx := context.Background()
	const latency = 500 * time.Millisecond
	p.SetLatency(latency)
	start := time.Now()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 2*latency {
		t.Fatalf("round trip took %v with %v each way", d, latency)
	}
	pipe := rdb.Pipeline()
	for i := 0; i < 50; i++ {
		pipe.Ping(ctx)
	}
	start = time.Now()
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 2*latency || d > 10*latency {
		t.Fatalf("pipeline of 50 took %v, want about %v", d, 2*latency)
	}
	p.SetLatency(0)
	start = time.Now()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d >= 2*latency {
		t.Fatalf("round trip took %v after latency was removed", d)
	}
}

func TestProxyBlackhole(t *testing.T) {
	t.Parallel()
	s, p, rdb := proxied(t)
	ctx := context.Background()
	p.Blackhole(true)
	err := rdb.Set(ctx, "k", "v", 0).Err()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("SET through a blackhole: %v, want a timeout", err)
	}
	if got := s.Do(t, "GET", "k"); got != nil {
		t.Fatalf("the blackholed SET reached the server: %v", got)
	}
	// New connections are accepted but go nowhere.
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial during blackhole: %v", err)
	}
	defer conn.Close()
	conn.Write([]byte("PING\r\n"))
	conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := conn.Read(make([]byte, 16)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read during blackhole: %d bytes, %v; want a timeout", n, err)
	}

	p.Blackhole(false)
	// The client dropped its timed-out connection and dials a fresh one.
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET after the blackhole: %v", err)
	}
}

func TestProxyResetAll(t *testing.T) {
	t.Parallel()
	s, p, rdb := proxied(t)
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("PING\r\n"))
	buf := make([]byte, 16)
	if n, err := conn.Read(buf); err != nil || string(buf[:n]) != "+PONG\r\n" {
		t.Fatalf("PING on a raw connection: %q, %v", buf[:n], err)
	}

	// A blocked command on the pooled connection fails fast, not after 5 s.
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		opt := *rdb.Options()
		opt.ReadTimeout = 10 * time.Second
		opt.MaxRetries = -1 // Options() reports the -1 of proxied as 0
		blocking := redis.NewClient(&opt)
		defer blocking.Close()
		done <- blocking.BLPop(ctx, 5*time.Second, "nothing").Err()
	}()
	err = waitFor(5*time.Second, func() error {
		info, _ := s.Do(t, "INFO", "clients").(string)
		if infoField(info, "blocked_clients") != "1" {
			return errors.New("BLPOP not blocked yet")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	p.ResetAll()
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Read(buf); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after ResetAll: %v, want ECONNRESET", err)
	}
	select {
	case err := <-done:
		if err == nil || errors.Is(err, redis.Nil) {
			t.Fatalf("BLPOP across ResetAll: %v, want a connection error", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("BLPOP still blocked after ResetAll")
	}
	// The proxy still accepts new connections.
	if err := rdb.Ping(ctx).Err(); err != nil {
		// The pool may hand out the reset connection once.
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING after ResetAll: %v", err)
		}
	}
}

func TestProxyHoldReplies(t *testing.T) {
	t.Parallel()
	s, p, rdb := proxied(t)
	opt := *rdb.Options()
	opt.ReadTimeout = 5 * time.Second
	opt.MaxRetries = -1 // Options() reports the -1 of proxied as 0
	slow := redis.NewClient(&opt)
	defer slow.Close()
	ctx := context.Background()
	if err := slow.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	p.HoldReplies(true)
	done := make(chan error, 1)
	go func() { done <- slow.Set(ctx, "held", "v", 0).Err() }()
	// The command reaches the server and runs ...
	err := waitFor(2*time.Second, func() error {
		if s.Do(t, "GET", "held") != "v" {
			return errors.New("SET not executed yet")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("a held SET did not reach the server: %v", err)
	}
	// ... but the client does not hear back.
	select {
	case err := <-done:
		t.Fatalf("SET returned (%v) while replies were held", err)
	case <-time.After(200 * time.Millisecond):
	}

	p.HoldReplies(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("SET after release: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("reply not delivered after HoldReplies(false)")
	}
}

func TestProxyCloseEndsConnections(t *testing.T) {
	t.Parallel()
	s := Start(t)
	p := StartProxy(t, s.Addr())
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	p.HoldReplies(true)
	conn.Write([]byte("PING\r\n"))
	p.Close()
	p.Close() // idempotent
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Read(make([]byte, 16)); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after Close: %v, want EOF", err)
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("proxy still accepts after Close")
	}
}

// TestProxyHoldOpenReplies: replies on connections open at the time are
// held; a connection dialled afterwards is served as usual.
func TestProxyHoldOpenReplies(t *testing.T) {
	t.Parallel()
	_, p, _ := proxied(t)
	ctx := context.Background()
	old, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	buf := make([]byte, 16)
	ping := func() (string, error) {
		if _, err := old.Write([]byte("PING\r\n")); err != nil {
			return "", err
		}
		n, err := old.Read(buf)
		return string(buf[:n]), err
	}
	if got, err := ping(); err != nil || got != "+PONG\r\n" { // the proxy has the connection now
		t.Fatalf("PING: %q, %v", got, err)
	}
	p.HoldOpenReplies(true)
	if _, err := old.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	// A new connection is not held.
	fresh := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer fresh.Close()
	if err := fresh.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING on a connection dialled after HoldOpenReplies: %v", err)
	}
	_ = old.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := old.Read(buf); err == nil {
		t.Fatalf("the open connection got %q while its replies were held", buf[:n])
	}
	p.HoldOpenReplies(false)
	_ = old.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := old.Read(buf); err != nil || string(buf[:n]) != "+PONG\r\n" {
		t.Fatalf("after HoldOpenReplies(false): %q, %v; want +PONG", buf[:n], err)
	}
}
