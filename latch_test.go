package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func init() {
	registerChildMode("latch-wait", func(ctx context.Context, c *dlock.Client, name string, ready func()) error {
		go func() { _ = c.Latch(name).Wait(ctx) }()
		ready() // the parent waits for the subscription itself
		return nil
	})
}

// latchKey is the key of latch name under the default prefix.
func latchKey(name string) string { return lockKey(name) + ":latch" }

// TestLatchWaitReturnsOnlyAtZero has waiters on two Clients and count-downs
// from three: no waiter returns before the last CountDown was sent, and all
// return promptly after it.
func TestLatchWaitReturnsOnlyAtZero(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	clients := []*dlock.Client{newClient(t, srv), newClient(t, srv), newClient(t, srv)}
	if ok, err := clients[0].Latch(name).TrySetCount(ctx, 3); err != nil || !ok {
		t.Fatalf("TrySetCount(3) = %v, %v", ok, err)
	}

	const waiters = 4
	var lastSent atomic.Bool
	returned := make(chan time.Time, waiters)
	var wg sync.WaitGroup
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func(c *dlock.Client) {
			defer wg.Done()
			if err := c.Latch(name).Wait(ctx); err != nil {
				t.Errorf("Wait: %v", err)
				return
			}
			if !lastSent.Load() {
				t.Errorf("Wait returned before the count reached zero")
			}
			returned <- time.Now()
		}(clients[i%2])
	}
	// Let the waiters subscribe, so the wake-up reaches them by pub/sub.
	rdb := srv.Client(t)
	waitFor(t, 10*time.Second, func() bool {
		n := rdb.PubSubNumSub(ctx, latchKey(name)).Val()[latchKey(name)]
		return n == 2
	}, "both clients to subscribe to the latch")

	for i, c := range clients {
		if i == len(clients)-1 {
			lastSent.Store(true)
		}
		start := time.Now()
		if err := c.Latch(name).CountDown(ctx); err != nil {
			t.Fatalf("CountDown %d: %v", i, err)
		}
		if i < len(clients)-1 {
			if n, err := c.Latch(name).Count(ctx); err != nil || n != int64(2-i) {
				t.Fatalf("Count() after %d count-downs = %d, %v", i+1, n, err)
			}
			select {
			case <-returned:
				t.Fatalf("a waiter returned with the count at %d", 2-i)
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		wg.Wait()
		close(returned)
		for at := range returned {
			// Waiters poll only every second: quicker means they were woken.
			if d := at.Sub(start); d > 500*time.Millisecond {
				t.Errorf("a waiter returned %v after the last CountDown", d)
			}
		}
	}
	if n := rdb.Exists(ctx, latchKey(name)).Val(); n != 0 {
		t.Error("the latch key survived the count reaching zero")
	}
}

func TestLatchTrySetCountAndCount(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(5*time.Second)) // a lock TTL: latches ignore it
	rdb := srv.Client(t)
	name := t.Name()
	ctx := testCtx(t)
	l := c.Latch(name)
	if l.Name() != name {
		t.Errorf("Name() = %q", l.Name())
	}
	if n, err := l.Count(ctx); err != nil || n != 0 {
		t.Errorf("Count() of a latch never set = %d, %v", n, err)
	}
	if err := l.Wait(ctx); err != nil {
		t.Errorf("Wait() on a latch never set: %v", err)
	}
	if ok, err := l.TrySetCount(ctx, 2); err != nil || !ok {
		t.Fatalf("TrySetCount(2) = %v, %v; want true", ok, err)
	}
	if d := rdb.PTTL(ctx, latchKey(name)).Val(); d < 23*time.Hour {
		t.Errorf("latch PTTL %v, want the 24h default despite the client's WithTTL", d)
	}
	if ok, err := l.TrySetCount(ctx, 5); err != nil || ok {
		t.Errorf("TrySetCount(5) while counting down = %v, %v; want false", ok, err)
	}
	if n, err := l.Count(ctx); err != nil || n != 2 {
		t.Errorf("Count() = %d, %v; want 2", n, err)
	}
	for i := 0; i < 3; i++ { // the third is a no-op at zero
		if err := l.CountDown(ctx); err != nil {
			t.Fatalf("CountDown %d: %v", i, err)
		}
	}
	if n, err := l.Count(ctx); err != nil || n != 0 {
		t.Errorf("Count() after counting down = %d, %v; want 0", n, err)
	}
	if n := rdb.Exists(ctx, latchKey(name)).Val(); n != 0 {
		t.Error("latch key left at zero")
	}
	// At zero it can be set again; a per-latch WithTTL sets its lifetime.
	short := c.Latch(name, dlock.WithTTL(10*time.Second))
	if ok, err := short.TrySetCount(ctx, 1); err != nil || !ok {
		t.Fatalf("TrySetCount at zero = %v, %v; want true", ok, err)
	}
	if d := rdb.PTTL(ctx, latchKey(name)).Val(); d > 10*time.Second || d < 9*time.Second {
		t.Errorf("latch PTTL %v, want the 10s given", d)
	}
	if err := short.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
}

// A latch that expires while counting reads as zero, but the waits that
// saw it counting end with ErrLatchExpired: its events did not all happen.
// A wait that finds it already gone cannot tell, and returns nil.
func TestLatchExpiryEndsWaitsWithErrLatchExpired(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	l := c.Latch(t.Name(), dlock.WithTTL(200*time.Millisecond))
	if ok, err := l.TrySetCount(ctx, 5); err != nil || !ok {
		t.Fatalf("TrySetCount = %v, %v", ok, err)
	}
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := l.Wait(ctx)
	if !errors.Is(err, dlock.ErrLatchExpired) || errors.Is(err, dlock.ErrNotObtained) || !strings.Contains(err.Error(), "last seen at 4") {
		t.Fatalf("Wait on a latch that expired at 4: got %v, want ErrLatchExpired naming the count", err)
	}
	// Waiters look again when the key would expire, not a poll later.
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Errorf("Wait returned %v after a latch with a 200ms TTL was set", d)
	}
	if n, err := l.Count(ctx); err != nil || n != 0 {
		t.Errorf("Count of an expired latch = %d, %v; want 0", n, err)
	}
	if err := l.Wait(ctx); err != nil {
		t.Errorf("Wait on a latch already gone: %v, want nil", err)
	}
}

// A latch counted down to zero is told from one that expired for as long as
// its calls are remembered, even by a waiter that only looks once it is
// gone; a new TrySetCount starts over.
func TestLatchCountedDownIsNotMistakenForExpired(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv)
	ctx := testCtx(t)
	name := t.Name()
	for round := 0; round < 3; round++ {
		if ok, err := a.Latch(name).TrySetCount(ctx, 2); err != nil || !ok {
			t.Fatalf("round %d: TrySetCount = %v, %v", round, ok, err)
		}
		got := make(chan error, 1)
		go func() { got <- b.Latch(name).Wait(ctx) }()
		for i := 0; i < 2; i++ {
			if err := a.Latch(name).CountDown(ctx); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("round %d: Wait on a latch counted down: %v", round, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Wait did not return after the count reached zero", round)
		}
	}
}

func TestLatchWaitDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	l := c.Latch(t.Name())
	if _, err := l.TrySetCount(testCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := l.Wait(ctx)
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrNotObtained and context.DeadlineExceeded", err)
	}
	if strings.Contains(err.Error(), "held by") {
		t.Errorf("the error speaks of a holder: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Wait returned %v after its 150ms deadline", d)
	}
	cancel()
	if err := l.Wait(ctx); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait with an ended ctx: got %v", err)
	}
}

func TestLatchLostSubscriptionCostsLatencyNotAHang(t *testing.T) {
	srv := redistest.Start(t)
	a := newClient(t, srv)
	b := newClient(t, srv, dlock.WithWaiterLease(600*time.Millisecond))
	name := t.Name()
	ctx := testCtx(t)
	if _, err := a.Latch(name).TrySetCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- b.Latch(name).Wait(ctx) }()
	rdb := srv.Client(t)
	waitFor(t, 10*time.Second, func() bool {
		return rdb.PubSubNumSub(ctx, latchKey(name)).Val()[latchKey(name)] == 1
	}, "the waiter to subscribe")
	// Cut every pub/sub connection and count down at once: the wake-up may
	// be lost, the waiter must still return.
	srv.Do(t, "CLIENT", "KILL", "TYPE", "pubsub")
	if err := a.Latch(name).CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter hung after its subscription was cut")
	}

	// A wake-up that is never heard at all (here: the count-down's writes
	// are made behind dlock's back, so nothing is published): the waiter's
	// poll, every WithWaiterLease/3 = 200ms, finds the count at zero.
	if _, err := a.Latch(name).TrySetCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	go func() { got <- b.Latch(name).Wait(ctx) }()
	waitFor(t, 10*time.Second, func() bool {
		return rdb.PubSubNumSub(ctx, latchKey(name)).Val()[latchKey(name)] == 1
	}, "the waiter to subscribe again")
	time.Sleep(50 * time.Millisecond) // let the waiter settle into its poll wait
	start := time.Now()
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, latchKey(name))
		p.Set(ctx, latchKey(name)+":zero", "1", time.Minute)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("the polling waiter returned %v after the count reached zero silently", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter hung when no wake-up was published")
	}
}

func TestLatchKeyConflictAndBadInput(t *testing.T) {
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	for what, setup := range map[string]func(key string){
		"list":         func(key string) { rdb.RPush(ctx, key, "a") },
		"text":         func(key string) { rdb.Set(ctx, key, "hello", time.Minute) },
		"no expiry":    func(key string) { rdb.Set(ctx, key, "3", 0) },
		"non-integral": func(key string) { rdb.Set(ctx, key, "1.5", time.Minute) },
	} {
		name := t.Name() + "-" + what
		rdb.Del(ctx, latchKey(name)) // from an earlier -count run
		setup(latchKey(name))
		l := c.Latch(name)
		start := time.Now()
		for op, try := range map[string]func() error{
			"TrySetCount": func() error { _, err := l.TrySetCount(ctx, 1); return err },
			"CountDown":   func() error { return l.CountDown(ctx) },
			"Count":       func() error { _, err := l.Count(ctx); return err },
			"Wait":        func() error { return l.Wait(ctx) },
		} {
			if err := try(); !errors.Is(err, dlock.ErrKeyConflict) {
				t.Errorf("%s on a %s: got %v, want ErrKeyConflict", op, what, err)
			}
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("took %v to report the conflicts", d)
		}
		if typ := rdb.Type(ctx, latchKey(name)).Val(); (what == "list") != (typ == "list") {
			t.Errorf("the foreign key was changed to a %s", typ)
		}
		if what == "no expiry" && rdb.Get(ctx, latchKey(name)).Val() != "3" {
			t.Errorf("the foreign value was changed")
		}
	}

	rdb2, counter := countingClient(t, srv)
	c2, err := dlock.New(rdb2)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	for what, try := range map[string]func() error{
		"count zero": func() error { _, err := c2.Latch("x").TrySetCount(ctx, 0); return err },
		"count < 0":  func() error { _, err := c2.Latch("x").TrySetCount(ctx, -2); return err },
		"count 2^53": func() error { _, err := c2.Latch("x").TrySetCount(ctx, 1<<53); return err },
		"empty name": func() error { return c2.Latch("").Wait(ctx) },
		"brace":      func() error { return c2.Latch("}ab").CountDown(ctx) },
		"bad TTL":    func() error { _, err := c2.Latch("x", dlock.WithTTL(0)).Count(ctx); return err },
		"nil option": func() error { _, err := c2.Latch("x", nil).TrySetCount(ctx, 1); return err },
		"bad prefix": func() error { return c2.Latch("x", dlock.WithKeyPrefix("{")).Wait(ctx) },
	} {
		if err := try(); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", what, err)
		}
	}
	if n := counter.n.Load(); n != 0 {
		t.Errorf("rejected input sent %d commands to Redis", n)
	}
}

func TestLatchAfterClose(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c, err := dlock.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	l := c.Latch(t.Name())
	if _, err := l.TrySetCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- l.Wait(ctx) }()
	waitFor(t, 10*time.Second, func() bool {
		return srv.Client(t).PubSubNumSub(ctx, latchKey(t.Name())).Val()[latchKey(t.Name())] == 1
	}, "the waiter to subscribe")
	_ = c.Close()
	if err := <-got; !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Wait during Close: got %v, want ErrClosed", err)
	}
	if err := l.CountDown(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("CountDown after Close: got %v, want ErrClosed", err)
	}
}

// TestLatchKilledWaiterProcess: a waiter killed with SIGKILL leaves nothing
// in Redis and does not disturb the others.
func TestLatchKilledWaiterProcess(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	c := newClient(t, srv)
	rdb := srv.Client(t)
	if _, err := c.Latch(name).TrySetCount(ctx, 1); err != nil {
		t.Fatal(err)
	}
	numSub := func() int64 { return rdb.PubSubNumSub(ctx, latchKey(name)).Val()[latchKey(name)] }
	waiter := startChild(t, srv.Addr(), "latch-wait", name)
	waitFor(t, 10*time.Second, func() bool { return numSub() == 1 }, "the child to wait on the latch")
	got := make(chan error, 1)
	go func() { got <- c.Latch(name).Wait(ctx) }()
	waitFor(t, 10*time.Second, func() bool { return numSub() == 2 }, "the local waiter to subscribe")
	waiter.kill()
	waitFor(t, 10*time.Second, func() bool { return numSub() == 1 }, "the killed child's subscription to go")
	if err := c.Latch(name).CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the live waiter did not return")
	}
	if n := rdb.Exists(ctx, latchKey(name)).Val(); n != 0 {
		t.Error("the latch key survived")
	}
}
