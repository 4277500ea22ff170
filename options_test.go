package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestNewRejectsBadInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	var nilClient *redis.Client
	var nilCluster *redis.ClusterClient
	cases := map[string]func() error{
		"nil":               func() error { _, err := dlock.New(nil); return err },
		"typed nil":         func() error { _, err := dlock.New(nilClient); return err },
		"typed nil cluster": func() error { _, err := dlock.New(nilCluster); return err },
		"nil option":        func() error { _, err := dlock.New(srv.Client(t), nil); return err },
		"zero TTL":          func() error { _, err := dlock.New(srv.Client(t), dlock.WithTTL(0)); return err },
		"nil driver":        func() error { _, err := dlock.NewWithDriver(nil); return err },
	}
	for name, f := range cases {
		if err := f(); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", name, err)
		}
	}
}

// TestBadInputSendsNothing checks every rejected argument: each gets
// ErrInvalidArgument before a single command (or dial) reaches Redis.
func TestBadInputSendsNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, counter := countingClient(t, srv)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t)
	long := strings.Repeat("x", dlock.MaxNameLen+1)
	cases := map[string][]dlock.Option{
		"":                       nil,
		"}a":                     nil,
		long:                     nil,
		"ttl zero":               {dlock.WithTTL(0)},
		"ttl negative":           {dlock.WithTTL(-time.Second)},
		"ttl below 1ms":          {dlock.WithTTL(500 * time.Microsecond)},
		"ttl within the drift":   {dlock.WithTTL(2 * time.Millisecond)},
		"ttl absurd":             {dlock.WithTTL(100 * 365 * 24 * time.Hour)},
		"prefix with brace":      {dlock.WithKeyPrefix("app{1}:")},
		"waiter lease too short": {dlock.WithWaiterLease(time.Millisecond)},
		"spin zero":              {dlock.WithWaitStrategy(dlock.SpinWait(0, 0))},
		"spin inverted":          {dlock.WithWaitStrategy(dlock.SpinWait(time.Second, time.Millisecond))},
		"max hold negative":      {dlock.WithMaxHold(-time.Second)},
		"owner info too long":    {dlock.WithOwnerInfo(strings.Repeat("i", dlock.MaxOwnerInfoLen+1))},
		"release timeout zero":   {dlock.WithReleaseTimeout(0)},
		"nil logger":             {dlock.WithLogger(nil)},
		"nil option":             {nil},
	}
	for name, opts := range cases {
		m := c.Mutex(name, opts...)
		if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%.20q TryLock: got %v, want ErrInvalidArgument", name, err)
		}
		if _, err := m.Lock(ctx); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%.20q Lock: got %v, want ErrInvalidArgument", name, err)
		}
		if err := c.Do(ctx, name, func(context.Context) error { return nil }, opts...); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%.20q Do: got %v, want ErrInvalidArgument", name, err)
		}
	}
	if err := c.Do(ctx, "fine", nil); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Do with nil fn: got %v, want ErrInvalidArgument", err)
	}
	if n := counter.n.Load(); n != 0 {
		t.Errorf("rejected input sent %d commands to Redis", n)
	}
}

func TestErrorsTellContentionFromOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv)
	srv.Kill()
	ctx := testCtx(t)
	_, err := c.Mutex(t.Name()).TryLock(ctx)
	if err == nil || errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock with Redis down: got %v, want a connection error that is not ErrNotObtained", err)
	}

	// A short wait returns at its deadline, not after clean-up attempts.
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Mutex(t.Name()).Lock(wctx)
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with Redis down: got %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Lock returned %v after a 200ms deadline", d)
	}

	// A longer one retries and reports the failure it kept meeting.
	wctx, cancel = context.WithTimeout(ctx, 4*time.Second)
	defer cancel()
	_, err = c.Mutex(t.Name()).Lock(wctx)
	if !errors.Is(err, dlock.ErrNotObtained) || !strings.Contains(err.Error(), "last error") {
		t.Fatalf("Lock with Redis down: got %v, want ErrNotObtained with the last error", err)
	}
}

// A one-attempt call whose context is already done reports the context's
// error, as when it ends during the attempt, and not ErrNotObtained, which
// for these calls says that somebody holds the lock.
func TestTryWithDoneContextIsNotContention(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	name := t.Name()
	leaseErr := func(_ *dlock.Lease, err error) error { return err }
	calls := map[string]func() error{
		"Mutex.TryLock":          func() error { return leaseErr(c.Mutex(name).TryLock(done)) },
		"FairMutex.TryLock":      func() error { return leaseErr(c.FairMutex(name).TryLock(done)) },
		"ReentrantMutex.TryLock": func() error { return leaseErr(c.ReentrantMutex(name).TryLock(dlock.WithOwner(done, "me"))) },
		"RWMutex.TryLock":        func() error { return leaseErr(c.RWMutex(name).TryLock(done)) },
		"RWMutex.TryRLock":       func() error { return leaseErr(c.RWMutex(name).TryRLock(done)) },
		"MultiLock.TryLock":      func() error { return leaseErr(c.MultiLock(name+"a", name+"b").TryLock(done)) },
		"Semaphore.TryAcquire": func() error {
			_, err := c.Semaphore(name, 1).TryAcquire(done, 1)
			return err
		},
	}
	for what, call := range calls {
		if err := call(); !errors.Is(err, context.Canceled) || errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("%s with a done context: got %v, want context.Canceled and not ErrNotObtained", what, err)
		}
	}
}

// A nil Option is reported by the lock it was given to, named once by its
// own kind.
func TestNilOptionNamesItsLock(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Shared(t))
	ctx := testCtx(t)
	leaseErr := func(_ *dlock.Lease, err error) error { return err }
	errs := map[string]error{
		"Mutex":          leaseErr(c.Mutex("n", nil).TryLock(ctx)),
		"FairMutex":      leaseErr(c.FairMutex("n", nil).TryLock(ctx)),
		"ReentrantMutex": leaseErr(c.ReentrantMutex("n", nil).TryLock(dlock.WithOwner(ctx, "me"))),
		"RWMutex":        leaseErr(c.RWMutex("n", nil).TryLock(ctx)),
		"Latch":          c.Latch("n", nil).CountDown(ctx),
	}
	_, errs["Semaphore"] = c.Semaphore("n", 1, nil).TryAcquire(ctx, 1)
	for kind, err := range errs {
		msg := fmt.Sprint(err)
		if !errors.Is(err, dlock.ErrInvalidArgument) || !strings.Contains(msg, "nil Option") ||
			!strings.Contains(msg, kind+`("n")`) || strings.Count(msg, `("n")`) != 1 {
			t.Errorf("%s with a nil Option: got %q, want ErrInvalidArgument naming %s(\"n\") once", kind, msg, kind)
		}
	}
}

// A WAIT must end before the Redis client gives up on its reply, or a WAIT
// that runs out reads as a broken connection (and go-redis sends the script
// again) instead of ErrReplicaAck: a replica-ack timeout not shorter than
// the client's read timeout is refused, for the Client and for one lock.
func TestReplicaAckTimeoutBelowReadTimeout(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	if _, err := dlock.New(rdb, dlock.WithReplicaAck(1, 2*time.Second)); !errors.Is(err, dlock.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "read timeout 1s") {
		t.Errorf("New with a WAIT timeout over the read timeout: got %v, want ErrInvalidArgument naming the read timeout", err)
	}
	c, err := dlock.New(rdb, dlock.WithReplicaAck(1, 500*time.Millisecond))
	if err != nil {
		t.Fatalf("New with a WAIT timeout under the read timeout: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_, err = c.Mutex("n", dlock.WithReplicaAck(1, time.Second)).TryLock(testCtx(t))
	if !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("a lock with a WAIT timeout equal to the read timeout: got %v, want ErrInvalidArgument", err)
	}
	// No read timeout (-1): nothing to compare with.
	unbounded := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: -1})
	t.Cleanup(func() { _ = unbounded.Close() })
	c2, err := dlock.New(unbounded, dlock.WithReplicaAck(1, 10*time.Second))
	if err != nil {
		t.Errorf("New without a read timeout: %v", err)
	} else {
		_ = c2.Close()
	}
}

// TestDeadlineBoundsCallsOnABlackholedServer: a go-redis client built
// without ContextTimeoutEnabled waits its 3s ReadTimeout on a silent server
// whatever the context says; dlock must still return at the deadline.
func TestDeadlineBoundsCallsOnABlackholedServer(t *testing.T) {
	t.Parallel()
	c, _, proxy := clientBehindProxy(t, redistest.Start(t).Addr(), &redis.Options{}) // default options
	ctx := testCtx(t)

	proxy.Blackhole(true)
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Mutex(t.Name()).Lock(wctx)
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("Lock returned %v after a 200ms deadline: the 3s read timeout was not cut short", d)
	}
	proxy.Blackhole(false)
}

// clientBehindProxy returns a Client whose go-redis client, built with opt,
// reaches a new redis-server through a proxy the test can silence; its
// clientBehindProxy returns a Client with opts whose go-redis client, built
// with opt, reaches the server at addr through a proxy the test can silence
// or slow down. Its connection is warmed up, and the Mutex scripts loaded,
// by the lock named after the test, taken and released (a request the
// proxy holds back must find its script loaded: one that meets NOSCRIPT runs
// nothing, and the client sends the script only once it hears that reply).
func clientBehindProxy(t *testing.T, addr string, opt *redis.Options, opts ...dlock.Option) (*dlock.Client, *redis.Client, *redistest.Proxy) {
	t.Helper()
	proxy := redistest.StartProxy(t, addr)
	opt.Addr = proxy.Addr()
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := testCtx(t)
	held, err := c.Mutex(t.Name()).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	return c, rdb, proxy
}

// evalStarted is a go-redis hook that reports each script call as it
// starts, so a test can act while the call is on the wire.
type evalStarted chan struct{}

func (h evalStarted) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h evalStarted) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			select {
			case h <- struct{}{}:
			default:
			}
		}
		return next(ctx, cmd)
	}
}

func (h evalStarted) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// lockCancelledOnSilentServer starts Lock with a context that can be
// cancelled but has no deadline, on a server that stops answering, cancels
// it while the first script call waits for its reply, and returns how
// long Lock took to return after the cancellation, and its error.
func lockCancelledOnSilentServer(t *testing.T, opt *redis.Options) (time.Duration, error) {
	t.Helper()
	opt.MaxRetries = -1 // one send: the test is about one call, not go-redis's retries
	c, rdb, proxy := clientBehindProxy(t, redistest.Start(t).Addr(), opt)

	started := make(evalStarted, 1)
	rdb.AddHook(started)
	proxy.Blackhole(true)
	defer func() {
		// End the abandoned call too: the client's Close waits for it,
		// and a client that never times out would wait for ever.
		proxy.Blackhole(false)
		proxy.ResetAll()
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Mutex(t.Name()).Lock(ctx)
		done <- err
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("Lock sent no script")
	}
	cancel()
	cancelled := time.Now()
	select {
	case err := <-done:
		return time.Since(cancelled), err
	case <-time.After(20 * time.Second):
		t.Fatal("Lock did not return 20s after its context was cancelled")
		return 0, nil
	}
}

// TestCancelEndsACallWithinTheReadTimeout: a call whose context can be
// cancelled but has no deadline runs in the caller, as go-redis does it, so
// on a silent server a cancellation takes effect when the client's read
// timeout ends the round trip.
func TestCancelEndsACallWithinTheReadTimeout(t *testing.T) {
	t.Parallel()
	took, err := lockCancelledOnSilentServer(t, &redis.Options{ReadTimeout: 500 * time.Millisecond})
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want ErrNotObtained and context.Canceled", err)
	}
	if took > 5*time.Second {
		t.Errorf("Lock returned %v after the cancellation, with a 500ms read timeout", took)
	}
}

// TestCancelEndsACallAtOnceWhenTheClientNeverTimesOut: with a client whose
// reads never time out, nothing but the context would end a call on a
// silent server, so such a call still runs in a goroutine of the driver's
// and Lock returns at the cancellation.
func TestCancelEndsACallAtOnceWhenTheClientNeverTimesOut(t *testing.T) {
	t.Parallel()
	took, err := lockCancelledOnSilentServer(t, &redis.Options{ReadTimeout: -1})
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want ErrNotObtained and context.Canceled", err)
	}
	if took > 5*time.Second {
		t.Errorf("Lock returned %v after the cancellation", took)
	}
}

// TestCloseReturnsWithinTheReleaseTimeoutOnASilentServer: with a client
// whose reads never time out, a renewal in flight and a command abandoned
// at its deadline wait for ever on a silent server. Close must still
// return, within the release timeout, and say why; the commands end when
// the connections do.
func TestCloseReturnsWithinTheReleaseTimeoutOnASilentServer(t *testing.T) {
	t.Parallel()
	const release = time.Second
	proxy := redistest.StartProxy(t, redistest.Start(t).Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: -1, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	started := make(evalStarted, 1)
	rdb.AddHook(started) // before any use: AddHook is not safe for concurrent use
	c, err := dlock.New(rdb, dlock.WithTTL(6*time.Second), dlock.WithReleaseTimeout(release))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	lease, err := c.Mutex(t.Name() + "-held").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-started // the Lock's own
	proxy.Blackhole(true)
	defer func() {
		proxy.Blackhole(false)
		proxy.ResetAll() // ends the commands Close left behind
	}()
	// The watchdog renews at TTL/3: 2s, and its renewal waits for ever.
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("no renewal was sent")
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := c.Mutex(t.Name()).Lock(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock on a silent server: got %v, want DeadlineExceeded", err)
	}

	start := time.Now()
	err = c.Close()
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "read timeout") {
		t.Errorf("Close with commands left on a silent server: got %v, want DeadlineExceeded and the reason", err)
	}
	// Without a bound Close would never return; a renewal that close did
	// not cancel would hold it until the lease's validity deadline (6s).
	if took < release/2 || took > 3*release {
		t.Errorf("Close returned after %v, want about the release timeout (%v)", took, release)
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("lease after Close: Err() = %v, want ErrLockLost", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
