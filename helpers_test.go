package dlock_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) {
	runChildIfRequested() // a worker process never returns from here
	redistest.Main(m)
}

// newClient returns a dlock Client with its own connection pool, as a
// separate process would have, closed when the test ends.
func newClient(t testing.TB, srv *redistest.Server, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	return newClientOn(t, srv.Client(t), opts...)
}

// newClientOn returns a dlock Client on rdb, closed when the test ends.
func newClientOn(t testing.TB, rdb redis.UniversalClient, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatalf("dlock.New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// lockKey is the key of lock name under the default prefix.
func lockKey(name string) string { return "dlock:{" + name + "}" }

// testCtx returns a context that ends well after anything a test should need.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// lockThenUnlock locks m in a goroutine and unlocks it at once; the
// channel gets the first error, or nil.
func lockThenUnlock(ctx context.Context, m *dlock.Mutex) <-chan error {
	got := make(chan error, 1)
	go func() {
		l, err := m.Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	return got
}

// commandCounter is a go-redis hook that counts what a client sends,
// including dials, to prove that rejected input sends nothing.
type commandCounter struct{ n atomic.Int64 }

func (h *commandCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.n.Add(1)
		return next(ctx, network, addr)
	}
}

func (h *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// countingClient returns a go-redis client for srv that counts its commands.
func countingClient(t testing.TB, srv *redistest.Server) (*redis.Client, *commandCounter) {
	rdb := srv.Client(t)
	h := &commandCounter{}
	rdb.AddHook(h)
	return rdb, h
}

// mustLock takes name on c or fails the test.
func mustLock(t testing.TB, c *dlock.Client, name string, opts ...dlock.Option) *dlock.Lease {
	t.Helper()
	l, err := c.Mutex(name, opts...).Lock(testCtx(t))
	if err != nil {
		t.Fatalf("Lock(%q): %v", name, err)
	}
	return l
}

// waitDone waits for a lease's Done channel, failing after limit.
func waitDone(t testing.TB, l *dlock.Lease, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-l.Done():
		return time.Since(start)
	case <-time.After(limit):
		t.Fatalf("lease of %q still not done after %v", l.Name(), limit)
		return 0
	}
}

// waitFor is the package's own (helpers_internal_test.go), for the tests
// outside it.
var waitFor = dlock.WaitFor

// afterLostReply runs call on a client behind proxies whose first replies
// never arrive: the proxies hold the replies on the connections open when
// it starts until executed reports that the servers ran the command, then
// reset every connection. go-redis sends the
// command again on a new connection (its MaxRetries), as it does after any
// read error, so the servers run it twice. It returns call's error.
func afterLostReply(t *testing.T, proxies []*redistest.Proxy, executed func() bool, call func() error) error {
	t.Helper()
	for _, p := range proxies {
		p.HoldOpenReplies(true)
	}
	done := make(chan error, 1)
	go func() { done <- call() }()
	for deadline := time.Now().Add(10 * time.Second); !executed(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			select {
			case err := <-done:
				t.Fatalf("the servers did not run the command; the call returned %v", err)
			default:
				t.Fatal("the servers did not run the command in 10s")
			}
		}
	}
	for _, p := range proxies {
		p.ResetAll()
	}
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("the call did not return after its connection was reset")
		return nil
	}
}

// clientWithLostReplies returns a Client behind a proxy, for
// afterLostReply, and its server.
func clientWithLostReplies(t *testing.T) (*dlock.Client, *redistest.Server, *redistest.Proxy) {
	t.Helper()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return newClientOn(t, rdb), srv, proxy
}

// clientThroughProxy returns a Client whose go-redis client reaches the
// shared server through a fault-injecting proxy, and sends every command
// once (MaxRetries -1), so a reply the proxy holds back is not retried.
func clientThroughProxy(t testing.TB) (*dlock.Client, *redistest.Proxy) {
	t.Helper()
	proxy := redistest.StartProxy(t, redistest.Shared(t).Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return newClientOn(t, rdb), proxy
}

// afterCmd is a go-redis hook that calls itself with every command once
// the command has returned, alone or in a pipeline, and with its error.
type afterCmd func(cmd redis.Cmder, err error)

func (f afterCmd) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f afterCmd) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		f(cmd, err)
		return err
	}
}

func (f afterCmd) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			f(cmd, cmd.Err())
		}
		return err
	}
}

// failureSignal is a go-redis hook that closes seen at the first command,
// alone or in a pipeline, that fails in a way match accepts.
type failureSignal struct {
	afterCmd // check
	match    func(cmd redis.Cmder, err error) bool
	once     sync.Once
	seen     chan struct{}
}

func newFailureSignal(match func(cmd redis.Cmder, err error) bool) *failureSignal {
	h := &failureSignal{match: match, seen: make(chan struct{})}
	h.afterCmd = h.check
	return h
}

func (h *failureSignal) check(cmd redis.Cmder, err error) {
	if err != nil && h.match(cmd, err) {
		h.once.Do(func() { close(h.seen) })
	}
}

// isScriptCall reports whether cmd runs script s (by its hash or, after
// NOSCRIPT, its source).
func isScriptCall(cmd redis.Cmder, s *driver.Script) bool {
	args := cmd.Args()
	if len(args) < 2 || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
		return false
	}
	a := fmt.Sprint(args[1])
	return a == s.Hash() || a == s.Source()
}

// scriptKey returns the first key of a script call (EVALSHA or EVAL with a
// key), "" when it has none: the driver passes it as a *string where
// go-redis does not route by it.
func scriptKey(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) < 4 {
		return ""
	}
	if p, ok := args[3].(*string); ok {
		return *p
	}
	return fmt.Sprint(args[3])
}
