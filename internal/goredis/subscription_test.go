package goredis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// An UNSUBSCRIBE whose caller left before it could be sent (another call
// held the gate) must still reach the server: the channel stayed
// subscribed for the connection's life, and the server sent its messages
// to a client that no longer wanted them (a soak test under faults found
// channels left that way). The loop sends it.
func TestUnsubscribeNeverSentIsSentByTheLoop(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	d := New(rdb)
	t.Cleanup(func() { _ = d.Close() })
	sub := d.Subscribe(&countingHandler{}).(*subscription)
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

	sub.send <- struct{}{} // another call holds the gate
	uctx, ucancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err := sub.Unsubscribe(uctx, ch)
	ucancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Unsubscribe while the gate is held: %v, want its deadline", err)
	}
	<-sub.send

	// The loop reads with a timeout of the health interval, and flushes
	// after each read.
	deadline := time.Now().Add(3 * healthInterval)
	for numSub() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the channel is still subscribed on the server %v after its Unsubscribe gave up", 3*healthInterval)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
