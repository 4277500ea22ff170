package goredis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/driverkit"
	"github.com/dlock-go/dlock/internal/redistest"
)

// An UNSUBSCRIBE whose caller left before it could be sent (another call
// held the connection's gate) must still reach the server; otherwise the
// channel stays subscribed for the connection's life, and the server sends
// its messages to a client that no longer wants them. The subscription's
// loop sends it.
func TestUnsubscribeNeverSentIsSentByTheLoop(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	d := New(rdb)
	t.Cleanup(func() { _ = d.Close() })
	conns := captureConns(d)
	sub := d.Subscribe(&countingHandler{})
	t.Cleanup(func() { _ = sub.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ch := t.Name()
	if err := sub.Subscribe(ctx, ch); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	numSub := func() int64 { return rdb.PubSubNumSub(ctx, ch).Val()[ch] }
	if n := numSub(); n != 1 {
		t.Fatalf("%d subscribers after Subscribe, want 1", n)
	}
	unsubscribeGivenUp(t, ctx, sub, <-conns, ch, numSub)
}

// captureConns makes d's subscriptions hand each connection they make to
// the channel it returns.
func captureConns(d *Driver) <-chan *pubsubConn {
	conns := make(chan *pubsubConn, 16)
	capture := func(dial func(driverkit.Hooks) driverkit.PubSubConn) func(driverkit.Hooks) driverkit.PubSubConn {
		return func(h driverkit.Hooks) driverkit.PubSubConn {
			c := dial(h)
			conns <- c.(*pubsubConn)
			return c
		}
	}
	ends, _ := clientTimeouts(d.rdb)
	lib := d.lib(ends)
	lib.PubSub.Dial = capture(lib.PubSub.Dial)
	if route := lib.PubSub.Route; route != nil {
		lib.PubSub.Route = func(ctx context.Context, channel string) (driverkit.Shard, error) {
			sh, err := route(ctx, channel)
			sh.Dial = capture(sh.Dial)
			return sh, err
		}
	}
	d.kit = driverkit.New(lib)
	return conns
}

// unsubscribeGivenUp holds conn's gate while sub's Unsubscribe of ch runs
// into its deadline, then checks that numSub, the server's count of ch's
// subscribers, falls to 0.
func unsubscribeGivenUp(t *testing.T, ctx context.Context, sub driver.Subscription, conn *pubsubConn, ch string, numSub func() int64) {
	t.Helper()
	conn.gate <- struct{}{} // another call holds the gate
	uctx, ucancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err := sub.Unsubscribe(uctx, ch)
	ucancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Unsubscribe while the gate is held: %v, want its deadline", err)
	}
	<-conn.gate

	deadline := time.Now().Add(3 * healthInterval)
	for numSub() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the channel is still subscribed on the server %v after its Unsubscribe gave up", 3*healthInterval)
		}
		time.Sleep(20 * time.Millisecond) // polling the server: nothing to wait on
	}
}
