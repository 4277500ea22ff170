package dlock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestFairGrantGoesToTheWaitersClient: a FairMutex's hand-off is published
// on the waiter Client's own grant channel (the lock key, ":g" and its
// tag), so no other Client that waits for the lock has to read it; a
// Mutex's stays on the lock's channel, where every version listens.
func TestFairGrantGoesToTheWaitersClient(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	for _, fair := range []bool{true, false} {
		name := t.Name() + map[bool]string{true: "-fair", false: "-mutex"}[fair]
		lockOf := func(c *dlock.Client) interface {
			Lock(context.Context) (*dlock.Lease, error)
		} {
			if fair {
				return c.FairMutex(name)
			}
			return c.Mutex(name)
		}
		holderClient, waiterClient := newClient(t, srv), newClient(t, srv)
		holder, err := lockOf(holderClient).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Every channel of the lock: its key's and any grant channel.
		sub := srv.Client(t).PSubscribe(ctx, lockKey(name)+"*")
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		got := make(chan *dlock.Lease, 1)
		go func() {
			l, err := lockOf(waiterClient).Lock(ctx)
			if err != nil {
				t.Errorf("fair %v: waiter: %v", fair, err)
			}
			got <- l
		}()
		waitQueued(t, srv, name, 1)
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		l := <-got
		if l == nil {
			return
		}
		mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		msg, err := sub.ReceiveMessage(mctx)
		cancel()
		if err != nil {
			t.Fatalf("fair %v: no grant published: %v", fair, err)
		}
		if token, _, _ := strings.Cut(msg.Payload, " "); token != strconv.FormatInt(l.Token(), 10) || !strings.Contains(msg.Payload, " "+l.Owner()) {
			t.Errorf("fair %v: published %q, want the grant of token %d to %s", fair, msg.Payload, l.Token(), l.Owner())
		}
		want := lockKey(name)
		if fair && (msg.Channel == want || !strings.HasPrefix(msg.Channel, want+":g")) {
			t.Errorf("FairMutex's grant published on %q, want the waiter's grant channel %s:g<tag>", msg.Channel, want)
		}
		if !fair && msg.Channel != want {
			t.Errorf("Mutex's grant published on %q, want the lock's channel %q", msg.Channel, want)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
}
