package conformance

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

func testSubscribeConfirmsBeforeReturning(t *testing.T, newDriver NewDriverFunc) {
	srv := redistest.Shared(t)
	d := newDriver(t, target(srv))
	rdb := inspector(t, srv)
	ctx := testCtx(t)
	rec := newRecorder()
	sub := d.Subscribe(rec)
	defer sub.Close()

	a, b, c := key(t, "a"), key(t, "b"), key(t, "c")
	if err := sub.Subscribe(ctx, a, b); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if err := sub.Subscribe(ctx, c); err != nil {
		t.Fatalf("second Subscribe: %v", err)
	}
	for _, ch := range []string{a, b, c} {
		// No waiting: Subscribe returned, so the server must know.
		if n := rdb.Publish(ctx, ch, "to "+ch).Val(); n != 1 {
			t.Errorf("PUBLISH %s right after Subscribe returned reached %d subscribers, want 1", ch, n)
		}
		rec.expect(t, ch, "to "+ch)
	}
}

// testSubscriptionReconnectsAndResets cuts the subscription's connection,
// then stops the server for a while: each time the subscription must come
// back on its own with every channel, and report a Reset only once its
// channels are confirmed again.
func testSubscriptionReconnectsAndResets(t *testing.T, newDriver NewDriverFunc) {
	srv := redistest.Start(t) // CLIENT KILL and Kill would hit the shared server's other users
	d := newDriver(t, target(srv))
	rdb := inspector(t, srv)
	ctx := testCtx(t)
	rec := newRecorder()
	sub := d.Subscribe(rec)
	defer sub.Close()
	a, b := key(t, "a"), key(t, "b")
	if err := sub.Subscribe(ctx, a); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}

	srv.Do(t, "CLIENT", "KILL", "TYPE", "pubsub")
	rec.expectReset(t, 10*time.Second)
	if n := rdb.Publish(ctx, a, "after kill").Val(); n != 1 {
		t.Errorf("PUBLISH after the Reset reached %d subscribers, want 1: Reset came before the channel was subscribed again", n)
	}
	rec.expect(t, a, "after kill")
	if err := sub.Subscribe(ctx, b); err != nil {
		t.Fatalf("Subscribe after the reconnection: %v", err)
	}

	srv.Kill()
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	err := sub.Subscribe(sctx, key(t, "while-down"))
	cancel()
	if err == nil {
		t.Errorf("Subscribe while the server is down returned nil")
	}
	srv.Restart()
	rec.expectReset(t, 10*time.Second)
	for _, ch := range []string{a, b} {
		waitFor(t, 5*time.Second, func() bool { return rdb.PubSubNumSub(ctx, ch).Val()[ch] == 1 },
			ch+" to be subscribed again after the restart")
		if n := rdb.Publish(ctx, ch, "after restart").Val(); n != 1 {
			t.Fatalf("PUBLISH %s after the restart reached %d subscribers, want 1", ch, n)
		}
		rec.expect(t, ch, "after restart")
	}
}

func testUnsubscribeStopsDelivery(t *testing.T, newDriver NewDriverFunc) {
	srv := redistest.Shared(t)
	d := newDriver(t, target(srv))
	rdb := inspector(t, srv)
	ctx := testCtx(t)
	rec := newRecorder()
	sub := d.Subscribe(rec)
	defer sub.Close()
	a, b := key(t, "a"), key(t, "b")
	if err := sub.Subscribe(ctx, a, b); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if err := sub.Unsubscribe(ctx, a); err != nil {
		t.Fatalf("Unsubscribe: %v", err)
	}
	waitFor(t, 5*time.Second, func() bool { return rdb.PubSubNumSub(ctx, a).Val()[a] == 0 }, "the server to drop "+a)
	if n := rdb.Publish(ctx, b, "still here").Val(); n != 1 {
		t.Errorf("PUBLISH %s reached %d subscribers, want 1", b, n)
	}
	rec.expect(t, b, "still here")
	// Subscribing again after Unsubscribe works.
	if err := sub.Subscribe(ctx, a); err != nil {
		t.Fatalf("Subscribe again: %v", err)
	}
	if n := rdb.Publish(ctx, a, "back").Val(); n != 1 {
		t.Errorf("PUBLISH %s after subscribing again reached %d subscribers, want 1", a, n)
	}
	rec.expect(t, a, "back")
}

// testUnsubscribeGivenUpStillReachesTheServer: an Unsubscribe whose
// caller leaves before it could be sent (the server stopped answering
// while another call was in flight) must still reach the server once it
// answers again, or the channel stays subscribed, and its messages keep
// coming to a client that wants none of them.
func testUnsubscribeGivenUpStillReachesTheServer(t *testing.T, newDriver NewDriverFunc) {
	srv := redistest.Start(t) // Pause would stop the shared server's other users
	d := newDriver(t, target(srv))
	rdb := inspector(t, srv)
	ctx := testCtx(t)
	sub := d.Subscribe(newRecorder())
	defer sub.Close()
	a, b := key(t, "a"), key(t, "b")
	if err := sub.Subscribe(ctx, a); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}

	srv.Pause()
	subscribed := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		subscribed <- sub.Subscribe(sctx, b)
	}()
	time.Sleep(200 * time.Millisecond) // the Subscribe is on its way
	uctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := sub.Unsubscribe(uctx, a)
	cancel()
	t.Logf("Unsubscribe while the server is stopped: %v", err)
	srv.Resume()
	t.Logf("Subscribe while the server is stopped: %v", <-subscribed)

	waitFor(t, 15*time.Second, func() bool { return rdb.PubSubNumSub(ctx, a).Val()[a] == 0 },
		"the server to drop "+a+", unsubscribed while it was stopped")
}

func testCloseStopsTheSubscription(t *testing.T, newDriver NewDriverFunc) {
	srv := redistest.Shared(t)
	d := newDriver(t, target(srv))
	rdb := inspector(t, srv)
	ctx := testCtx(t)

	unused := d.Subscribe(newRecorder())
	if err := unused.Close(); err != nil {
		t.Errorf("Close of a subscription that never subscribed: %v", err)
	}
	if err := unused.Subscribe(ctx, key(t, "x")); err == nil {
		t.Errorf("Subscribe after Close returned nil")
	}

	rec := newRecorder()
	sub := d.Subscribe(rec)
	ch := key(t, "ch")
	if err := sub.Subscribe(ctx, ch); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	if err := sub.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	rec.closed.Store(true)
	if err := sub.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	waitFor(t, 5*time.Second, func() bool { return rdb.PubSubNumSub(ctx, ch).Val()[ch] == 0 },
		"the server to drop the closed subscription's connection")
	rdb.Publish(ctx, ch, "too late")
	if err := sub.Subscribe(ctx, ch); err == nil {
		t.Errorf("Subscribe after Close returned nil")
	}
	if n := rec.late.Load(); n != 0 {
		t.Errorf("the Handler was called %d times after Close returned", n)
	}
	// Leaked goroutines are caught by goleak in redistest.Main.
}

// recorder is a driver.Handler that records what it hears.
type recorder struct {
	msgs   chan message
	resets chan struct{}
	closed atomic.Bool  // set once Close returned
	late   atomic.Int32 // calls after closed was set
}

type message struct{ channel, payload string }

func newRecorder() *recorder {
	return &recorder{msgs: make(chan message, 64), resets: make(chan struct{}, 16)}
}

// Message implements driver.Handler; it never blocks. A message that finds
// the buffer full is dropped, and the test misses it.
func (r *recorder) Message(channel, payload string) {
	if r.closed.Load() {
		r.late.Add(1)
		return
	}
	select {
	case r.msgs <- message{channel, payload}:
	default:
	}
}

// Reset implements driver.Handler.
func (r *recorder) Reset() {
	if r.closed.Load() {
		r.late.Add(1)
		return
	}
	select {
	case r.resets <- struct{}{}:
	default:
	}
}

// expect fails t unless the next message heard is payload on channel.
func (r *recorder) expect(t testing.TB, channel, payload string) {
	t.Helper()
	select {
	case m := <-r.msgs:
		if m.channel != channel || m.payload != payload {
			t.Errorf("heard %q on %s, want %q on %s", m.payload, m.channel, payload, channel)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("did not hear %q on %s", payload, channel)
	}
}

// expectReset waits for a Reset, then drains any further ones.
func (r *recorder) expectReset(t testing.TB, limit time.Duration) {
	t.Helper()
	select {
	case <-r.resets:
	case <-time.After(limit):
		t.Fatalf("no Reset within %v", limit)
	}
	for {
		select {
		case <-r.resets:
		default:
			return
		}
	}
}
