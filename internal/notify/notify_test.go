package notify

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/redistest"
)

// gatedDriver holds its subscription's first Unsubscribe until released,
// so that a test can act while an UNSUBSCRIBE is on its way.
type gatedDriver struct {
	driver.Driver
	unsubscribing chan struct{} // closed when the first Unsubscribe starts
	release       chan struct{} // close to let it go on
}

func (d *gatedDriver) Subscribe(h driver.Handler) driver.Subscription {
	return &gatedSubscription{Subscription: d.Driver.Subscribe(h), d: d}
}

type gatedSubscription struct {
	driver.Subscription
	d    *gatedDriver
	once sync.Once
}

func (s *gatedSubscription) Unsubscribe(ctx context.Context, channels ...string) error {
	s.once.Do(func() {
		close(s.d.unsubscribing)
		<-s.d.release
	})
	return s.Subscription.Unsubscribe(ctx, channels...)
}

// A waiter that comes while its channel is being unsubscribed (its linger
// ran out) must end up subscribed: its SUBSCRIBE must not pass the
// UNSUBSCRIBE and be undone by it, leaving the notifier sure of a
// subscription the server no longer has.
func TestWaiterArrivingWhileItsChannelExpiresStaysSubscribed(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	d := &gatedDriver{Driver: goredis.New(rdb), unsubscribing: make(chan struct{}), release: make(chan struct{})}
	n := New(d, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	channel := "dlock-test:{" + t.Name() + "}"

	first := n.Register(channel, "a")
	if err := n.Subscribe(ctx, channel); err != nil {
		t.Fatal(err)
	}
	n.Unregister(channel, first) // starts the linger
	n.mu.Lock()
	cs := n.channels[channel]
	stopped := cs != nil && cs.idle != nil && cs.idle.Stop()
	n.mu.Unlock()
	if !stopped {
		t.Fatal("no linger timer to stand in for")
	}
	go n.expire(channel, cs) // as the linger timer does when it fires

	<-d.unsubscribing
	second := n.Register(channel, "b")
	subscribed := make(chan error, 1)
	go func() { subscribed <- n.Subscribe(ctx, channel) }()
	n.mu.Lock()
	waitsForTheUnsubscribe := n.channels[channel] == cs
	n.mu.Unlock()
	if !waitsForTheUnsubscribe {
		// The new waiter subscribes at once: let it finish first, the
		// order that undid its subscription.
		if err := <-subscribed; err != nil {
			t.Fatal(err)
		}
		subscribed <- nil
	}
	close(d.release)
	if err := <-subscribed; err != nil {
		t.Fatal(err)
	}
	n.lingers.Wait() // expire has returned

	if !n.Confirmed(channel) {
		t.Fatal("the notifier does not count the channel subscribed")
	}
	if got := rdb.PubSubNumSub(ctx, channel).Val()[channel]; got != 1 {
		t.Errorf("the server has %d subscribers on the channel, want 1: the UNSUBSCRIBE undid the new waiter's SUBSCRIBE", got)
	}
	if err := rdb.Publish(ctx, channel, "7 1000 0 b").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-second.Signal:
	case <-time.After(10 * time.Second):
		t.Error("the grant published to the new waiter never reached it")
	}
	n.Unregister(channel, second)
}

func TestParseGrant(t *testing.T) {
	cases := []struct {
		payload string
		ok      bool
		fence   int64
		px      time.Duration
		atUs    int64
		owner   string
	}{
		{"1795286337723686 3000 1795286337723999 abc;host=h pid=1", true, 1795286337723686, 3 * time.Second, 1795286337723999, "abc;host=h pid=1"},
		{"7 1 0 o", true, 7, time.Millisecond, 0, "o"},
		{"7 0 5 o", false, 0, 0, 0, ""},                   // a grant without a claim window is invalid
		{"7 1 5 ", false, 0, 0, 0, ""},                    // no owner
		{"7 1 o", false, 0, 0, 0, ""},                     // no grant time
		{"x 1 5 o", false, 0, 0, 0, ""},                   // not a number
		{"7 1 -1 o", false, 0, 0, 0, ""},                  // a negative grant time
		{"wake", false, 0, 0, 0, ""},                      // a plain wake-up
		{"", false, 0, 0, 0, ""},                          // empty
		{"1 -5 5 owner", false, 0, 0, 0, ""},              // negative px
		{"1 9223372036854775807 5 o", false, 0, 0, 0, ""}, // px overflowing a Duration
	}
	for _, c := range cases {
		g, owner, ok := ParseGrant(c.payload)
		if ok != c.ok || g.Fence != c.fence || g.PX != c.px || g.AtUs != c.atUs || owner != c.owner {
			t.Errorf("ParseGrant(%q) = %+v, %q, %v; want %d, %v, %d, %q, %v",
				c.payload, g, owner, ok, c.fence, c.px, c.atUs, c.owner, c.ok)
		}
	}
}

// A wake-up for every waiter on a channel (a Reset, or a message that is
// not a grant) also reaches an owner whose first attempt is still in
// flight (Expect): its waiter registers after the wake-up has gone by, and
// must ask the server again then, not at its next poll.
func TestWakeUpReachesAnAttemptInFlight(t *testing.T) {
	for name, wake := range map[string]func(n *Notifier, channel string){
		"reset":   func(n *Notifier, _ string) { n.Reset() },
		"message": func(n *Notifier, channel string) { n.Message(channel, "zero") },
	} {
		t.Run(name, func(t *testing.T) {
			n := New(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
			const channel = "dlock-test:{wake}"
			n.channels[channel] = &channelState{waiters: map[string][]*Waiter{}, confirmed: true}
			for _, owner := range []string{"a", "b"} {
				if !n.Expect(channel, owner) {
					t.Fatal("Expect on a confirmed channel = false")
				}
			}
			wake(n, channel)
			n.Close() // no linger after the last Unregister: there is no driver
			for _, owner := range []string{"a", "b"} {
				w := n.Register(channel, owner)
				select {
				case <-w.Signal:
				default:
					t.Errorf("%s's waiter, registered after the wake-up, was not asked to attempt again", owner)
				}
				if g, ok := w.TakeGrant(); ok {
					t.Errorf("the wake-up left %s a grant %+v", owner, g)
				}
				n.Unregister(channel, w)
			}
		})
	}
}
