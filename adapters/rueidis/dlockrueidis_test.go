package dlockrueidis_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/dlock-go/dlock"
	dlockrueidis "github.com/dlock-go/dlock/adapters/rueidis"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/conformance"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// newRueidis returns a rueidis client for target, with default options
// but for what set changes, closed by t's cleanup.
func newRueidis(t testing.TB, target conformance.Target, set ...func(*rueidis.ClientOption)) rueidis.Client {
	t.Helper()
	opt := rueidis.ClientOption{InitAddress: target.Addrs, Password: target.Password}
	for _, f := range set {
		f(&opt)
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(client.Close)
	return client
}

func TestConformance(t *testing.T) {
	conformance.Run(t, func(t testing.TB, srv *redistest.Server, opts ...dlock.Option) *dlock.Client {
		t.Helper()
		client := newRueidis(t, conformance.Target{Addrs: []string{srv.Addr()}, Password: srv.Password()})
		c, err := dlockrueidis.New(client, opts...)
		if err != nil {
			t.Fatalf("dlockrueidis.New: %v", err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	})
}

func TestDriverConformance(t *testing.T) {
	conformance.RunDriver(t, func(t testing.TB, target conformance.Target) driver.Driver {
		t.Helper()
		return dlockrueidis.NewDriver(newRueidis(t, target))
	})
}

func TestScanner(t *testing.T) {
	conformance.RunScanner(t, func(t testing.TB, target conformance.Target) driver.Driver {
		t.Helper()
		return dlockrueidis.NewDriver(newRueidis(t, target))
	})
}

// TestCloseWhileTheServerStopsMidSubscription hooks the conformance suite's
// dial into rueidis with DialCtxFn; Dialer.Timeout bounds the dial and the
// handshake.
func TestCloseWhileTheServerStopsMidSubscription(t *testing.T) {
	conformance.RunCloseWhileTheServerStops(t, func(t testing.TB, target conformance.Target, dial conformance.DialFunc, timeout time.Duration) driver.Driver {
		t.Helper()
		return dlockrueidis.NewDriver(newRueidis(t, target, func(opt *rueidis.ClientOption) {
			opt.DialCtxFn = func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
				return dial(ctx, d, addr)
			}
			opt.Dialer.Timeout = timeout
		}))
	})
}

func TestNewRejectsNilClient(t *testing.T) {
	if _, err := dlockrueidis.New(nil); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("New(nil): got %v, want ErrInvalidArgument", err)
	}
}

// TestCloseAfterTheLibraryClient closes the rueidis client under a live
// subscription first, the wrong order: the subscription must still close
// promptly, and leave no goroutine behind (goleak, in TestMain).
func TestCloseAfterTheLibraryClient(t *testing.T) {
	srv := redistest.Shared(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	sub := dlockrueidis.NewDriver(client).Subscribe(nopHandler{})
	if err := sub.Subscribe(context.Background(), "{"+t.Name()+"}"); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	client.Close()
	done := make(chan struct{})
	go func() {
		_ = sub.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung after the library client was closed")
	}
}

type nopHandler struct{}

func (nopHandler) Message(string, string) {}
func (nopHandler) Reset()                 {}
