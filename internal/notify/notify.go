// Package notify multiplexes one pub/sub subscription per Redis deployment
// across every lock name a process waits for: it routes each grant message
// to the waiter it names and wakes the others to ask the server again.
package notify

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
)

// Linger is how long a channel stays subscribed after its last
// local waiter left. A contended lock keeps getting waiters, and re-subscribing
// for each would add a round trip to every wait.
const Linger = 30 * time.Second

// notifier is one pub/sub subscription to a Redis deployment (a Client's, or
// one Redlock node's), multiplexed across every lock name: a channel is
// subscribed while some local waiter waits on it (and for Linger
// after), and each message is routed to the waiter it names. It implements
// driver.Handler.
type Notifier struct {
	drv    driver.Driver // opens the subscription, at the first wait
	logger *slog.Logger
	linger time.Duration // Linger; tests shorten it (SetLinger)

	mu       sync.Mutex
	sub      driver.Subscription
	channels map[string]*channelState
	closed   bool
	lingers  sync.WaitGroup
	// expected holds the owners whose first attempt is in flight on a
	// channel already subscribed: a Lock registers its waiter only after
	// that attempt, and a grant to it may arrive first. The value is the
	// grant once it came. Every other client on the channel hears the same
	// grant and drops it at once.
	expected map[expectKey]*Grant
}

type channelState struct {
	// waiters by the owner grants name; a few goroutines may share one
	// owner (a reentrant lock's), and the first of them takes a grant.
	waiters   map[string][]*Waiter
	confirmed bool // the server confirmed the subscription
	// unsure: the last subscribe failed, but its SUBSCRIBE may have
	// reached the server (a wait that ended before the confirmation did),
	// and the driver keeps the channel: it is unsubscribed as a confirmed
	// one is, after the linger, or it would stay subscribed for good.
	unsure  bool
	pending chan struct{} // closed when a subscribe in flight ends
	idle    *time.Timer   // unsubscribes after the linger, when no waiter is left
}

// Waiter is one Lock call waiting for a lock. The notifier sets its grant and
// signals it; the waiting goroutine takes the grant.
type Waiter struct {
	owner  string
	Signal chan struct{} // capacity 1: a grant arrived, or the server must be asked again
	mu     sync.Mutex
	grant  *Grant
}

func New(drv driver.Driver, logger *slog.Logger) *Notifier {
	return &Notifier{drv: drv, logger: logger, linger: Linger, channels: make(map[string]*channelState)}
}

// register adds a waiter for owner on channel. Register before the first
// acquire attempt, so that a grant published right after it is not missed.
func (n *Notifier) Register(channel, owner string) *Waiter {
	return n.RegisterSignal(channel, owner, make(chan struct{}, 1))
}

// registerSignal is register with the waiter's signal given: a Redlock
// waiter listens to every node with one channel (capacity 1).
func (n *Notifier) RegisterSignal(channel, owner string, signal chan struct{}) *Waiter {
	w := &Waiter{owner: owner, Signal: signal}
	n.mu.Lock()
	cs := n.channels[channel]
	if cs == nil {
		cs = &channelState{waiters: make(map[string][]*Waiter)}
		n.channels[channel] = cs
	}
	if cs.idle != nil && cs.idle.Stop() {
		n.lingers.Done()
	}
	cs.idle = nil
	cs.waiters[owner] = append(cs.waiters[owner], w)
	k := expectKey{channel, owner}
	if g, ok := n.expected[k]; ok {
		delete(n.expected, k)
		switch g {
		case nil:
		case askAgain:
			w.Wake(nil)
		default:
			w.Wake(g)
		}
	}
	n.mu.Unlock()
	return w
}

// unregister removes a waiter. The channel stays subscribed for the linger.
func (n *Notifier) Unregister(channel string, w *Waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := n.channels[channel]
	if cs == nil || !removeWaiter(cs.waiters, w) {
		return
	}
	if len(cs.waiters) > 0 || cs.pending != nil {
		return
	}
	n.idleLocked(channel, cs)
}

// idleLocked lets go of a channel without waiters: at once when it was
// never subscribed, after the linger otherwise.
func (n *Notifier) idleLocked(channel string, cs *channelState) {
	if !cs.confirmed && !cs.unsure || n.closed {
		delete(n.channels, channel)
		return
	}
	n.lingers.Add(1)
	cs.idle = time.AfterFunc(n.linger, func() { n.expire(channel, cs) })
}

// removeWaiter deletes w from its owner's list; false if it was not there.
func removeWaiter(waiters map[string][]*Waiter, w *Waiter) bool {
	list := waiters[w.owner]
	for i, x := range list {
		if x == w {
			if len(list) == 1 {
				delete(waiters, w.owner)
			} else {
				waiters[w.owner] = append(list[:i:i], list[i+1:]...)
			}
			return true
		}
	}
	return false
}

// expire unsubscribes a channel that stayed without waiters for the linger.
// The channel stays in n.channels, unconfirmed and pending, until the
// server has been told: a waiter that comes meanwhile subscribes after the
// UNSUBSCRIBE, not before it: a SUBSCRIBE that passed the UNSUBSCRIBE would
// be undone by it, and the notifier would count the channel confirmed while
// the server sent nothing.
func (n *Notifier) expire(channel string, cs *channelState) {
	defer n.lingers.Done()
	n.mu.Lock()
	if n.closed || n.channels[channel] != cs || len(cs.waiters) > 0 || cs.pending != nil {
		n.mu.Unlock()
		return
	}
	done := make(chan struct{})
	cs.pending, cs.confirmed, cs.unsure = done, false, false
	sub := n.sub
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := sub.Unsubscribe(ctx, channel)
	cancel()
	if err != nil {
		n.logger.Debug("dlock: unsubscribe failed", slog.String("channel", channel), slog.Any("error", err))
	}
	n.mu.Lock()
	cs.pending = nil
	if n.channels[channel] == cs && len(cs.waiters) == 0 {
		delete(n.channels, channel)
	}
	close(done)
	n.mu.Unlock()
}

// confirmed reports whether channel's subscription is in place, so that a
// message published from now on reaches this client.
func (n *Notifier) Confirmed(channel string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := n.channels[channel]
	return cs != nil && cs.confirmed
}

// subscribe makes sure channel is subscribed, waiting for the server's
// confirmation. A waiter must be registered on channel.
func (n *Notifier) Subscribe(ctx context.Context, channel string) error {
	for {
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			return errs.ErrClosed
		}
		cs := n.channels[channel]
		if cs == nil || cs.confirmed {
			n.mu.Unlock()
			return nil
		}
		if p := cs.pending; p != nil {
			n.mu.Unlock()
			select {
			case <-p:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		done := make(chan struct{})
		cs.pending = done
		if n.sub == nil {
			n.sub = n.drv.Subscribe(n)
		}
		sub := n.sub
		n.mu.Unlock()

		err := sub.Subscribe(ctx, channel)
		n.mu.Lock()
		cs.pending = nil
		cs.confirmed = err == nil
		cs.unsure = err != nil
		// The waiters may all have left meanwhile (a Redlock's subscribe
		// goes on without them): unregister left the channel to this.
		if len(cs.waiters) == 0 && n.channels[channel] == cs && cs.idle == nil {
			n.idleLocked(channel, cs)
		}
		close(done)
		n.mu.Unlock()
		return err
	}
}

// close ends the subscription. Waiters see the Client's closed channel.
func (n *Notifier) Close() {
	n.mu.Lock()
	n.closed = true
	for _, cs := range n.channels {
		if cs.idle != nil && cs.idle.Stop() {
			n.lingers.Done()
		}
	}
	sub := n.sub
	n.mu.Unlock()
	n.lingers.Wait()
	if sub != nil {
		_ = sub.Close()
	}
}

// SetLinger sets how long a channel stays subscribed after its last waiter
// left (Linger otherwise); soak tests shorten it.
func (n *Notifier) SetLinger(d time.Duration) {
	n.mu.Lock()
	n.linger = d
	n.mu.Unlock()
}

// Counts is what a Notifier keeps: the channels it knows (subscribed or
// lingering), the waiters registered on them, and the owners whose first
// attempt's grant it keeps (Expect).
type Counts struct{ Channels, Waiters, Expected int }

// Counts returns what n keeps now.
func (n *Notifier) Counts() Counts {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := Counts{Channels: len(n.channels), Expected: len(n.expected)}
	for _, cs := range n.channels {
		for _, ws := range cs.waiters {
			c.Waiters += len(ws)
		}
	}
	return c
}

// Waiters returns how many waiters are registered on channel.
func (n *Notifier) Waiters(channel string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	w := 0
	if cs := n.channels[channel]; cs != nil {
		for _, ws := range cs.waiters {
			w += len(ws)
		}
	}
	return w
}
