package dlock_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/conformance"
	"github.com/dlock-go/dlock/internal/goredis"
)

// TestConformance runs the suite every driver must pass over the built-in
// go-redis driver. The adapter modules run it over their client libraries.
func TestConformance(t *testing.T) {
	conformance.Run(t, newClient)
}

// TestDriverConformance runs the driver-level suite over the go-redis driver.
func TestDriverConformance(t *testing.T) {
	conformance.RunDriver(t, func(t testing.TB, target conformance.Target) driver.Driver {
		return newGoRedisDriver(t, target, nil, 0)
	})
}

// TestScannerConformance runs the suite of the driver's driver.Scanner (and
// Client.List on a Cluster) over the go-redis driver.
func TestScannerConformance(t *testing.T) {
	conformance.RunScanner(t, func(t testing.TB, target conformance.Target) driver.Driver {
		return newGoRedisDriver(t, target, nil, 0)
	})
}

// TestCloseWhileTheServerStopsMidSubscription runs the suite's Close
// scenario over the go-redis driver, the suite's hook making every
// connection through Options.Dialer. The dial is bounded by the hook's
// net.Dialer (and, for pooled connections, go-redis's DialTimeout), the
// handshake (HELLO, sent as commands) by the read and write timeouts, so
// all of them get the suite's timeout.
func TestCloseWhileTheServerStopsMidSubscription(t *testing.T) {
	conformance.RunCloseWhileTheServerStops(t, func(t testing.TB, target conformance.Target, dial conformance.DialFunc, timeout time.Duration) driver.Driver {
		d := &net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute} // go-redis's default dialer's settings
		return newGoRedisDriver(t, target, func(ctx context.Context, _, addr string) (net.Conn, error) {
			return dial(ctx, d, addr)
		}, timeout)
	})
}

// newGoRedisDriver returns the go-redis driver over a new go-redis client of
// target, closed by t's cleanup. A non-nil dialer makes its connections;
// timeout, when not 0, is its dial, read and write timeout.
func newGoRedisDriver(t testing.TB, target conformance.Target, dialer func(ctx context.Context, network, addr string) (net.Conn, error), timeout time.Duration) driver.Driver {
	t.Helper()
	addrs := target.Addrs
	if !target.Cluster {
		addrs = addrs[:1]
	}
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:         addrs,
		IsClusterMode: target.Cluster,
		Password:      target.Password,
		Dialer:        dialer,
		DialTimeout:   timeout,
		ReadTimeout:   timeout,
		WriteTimeout:  timeout,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return goredis.New(rdb)
}
