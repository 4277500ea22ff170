package driverkit

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/handlergate"
)

// PubSub is how a Lib's subscriptions connect.
type PubSub struct {
	// Dial opens a new dedicated connection for pub/sub whose messages and
	// subscription replies go to h. It does not fail: a connection that
	// cannot be made reports it through PubSubConn.Lost. It may block for
	// the library's dial timeout (rueidis's Dedicate takes no context):
	// the subscription calls it from a goroutine that Close does not wait
	// for.
	Dial func(h Hooks) PubSubConn
	// ConfirmTimeout, optional, bounds the wait for the server to confirm
	// the channels a new connection subscribes to; past it the connection
	// is replaced. Zero means 5 s.
	ConfirmTimeout time.Duration

	// Sharded, optional, reports whether the deployment has sharded
	// pub/sub (SSUBSCRIBE, SPUBLISH: a Cluster of Redis 7.0 or later) and
	// the driver is to use it; the answer must not change once given.
	// Route and Refresh are then required.
	Sharded func(ctx context.Context) (bool, error)
	// Route returns the master that serves channel's slot now, as far as
	// the client's view of the Cluster knows.
	Route func(ctx context.Context, channel string) (Shard, error)
	// Refresh reloads the client's view of the Cluster.
	Refresh func(ctx context.Context) error
}

// Shard is one master of a Cluster for sharded pub/sub.
type Shard struct {
	// Addr names the master; channels routed to the same Addr share one
	// connection.
	Addr string
	// Dial opens a connection to the master, as PubSub.Dial does, whose
	// Subscribe and Unsubscribe send SSUBSCRIBE and SUNSUBSCRIBE, one
	// command per slot.
	Dial func(h Hooks) PubSubConn
}

// Hooks receive what a PubSubConn hears. The library calls them one at a
// time from a goroutine of its own; they never block.
type Hooks struct {
	// Message is called for each message on a subscribed channel.
	Message func(channel, payload string)
	// Subscription is called for each subscription reply of the server:
	// kind is "subscribe" or "ssubscribe" when it confirms channel,
	// "unsubscribe" or "sunsubscribe" when it drops it (asked, or, for
	// sharded pub/sub, because channel's slot moved to another master).
	Subscription func(kind, channel string)
}

// PubSubConn is one dedicated pub/sub connection of a client library.
type PubSubConn interface {
	// Subscribe sends SUBSCRIBE (or SSUBSCRIBE) for channels. The server's
	// confirmations arrive through Hooks.Subscription. It returns when ctx
	// ends: a subscription's callers wait no longer than their contexts.
	Subscribe(ctx context.Context, channels ...string) error
	// Unsubscribe sends UNSUBSCRIBE (or SUNSUBSCRIBE) for channels, and
	// returns when ctx ends too.
	Unsubscribe(ctx context.Context, channels ...string) error
	// Lost returns a channel that receives at most one error, why the
	// connection ended, and is closed once the hooks will not be called
	// any more.
	Lost() <-chan error
	// Close closes the connection; Lost is closed soon after. It may wait
	// for the library (rueidis waits up to 1 s for the reply to a last
	// PING, go-redis for a connection being made), which is why the
	// subscription never waits for it in its own Close.
	Close()
}

var (
	errClosed   = errors.New("dlock: subscription closed")
	errConnLost = errors.New("dlock: pub/sub connection lost before the server confirmed the subscription")
)

// defaultConfirmTimeout is PubSub.ConfirmTimeout's default.
const defaultConfirmTimeout = 5 * time.Second

func (p PubSub) confirmTimeout() time.Duration {
	if p.ConfirmTimeout > 0 {
		return p.ConfirmTimeout
	}
	return defaultConfirmTimeout
}

// PublishCommand implements driver.Driver: SPUBLISH where the subscriptions
// use sharded pub/sub (PubSub.Sharded), so that a release notifies only
// the nodes of the lock's slot; PUBLISH otherwise, which reaches a
// subscriber connected to any node, Cluster included (where the message is
// broadcast over the cluster bus).
func (d *Driver[C]) PublishCommand() string {
	if d.lib.PubSub.Sharded != nil {
		if sharded, _ := d.lib.PubSub.Sharded(context.Background()); sharded {
			return "SPUBLISH"
		}
	}
	return "PUBLISH"
}

// Subscribe implements driver.Driver. The subscription connects on its
// first Subscribe: where PubSub.Sharded says so, to each channel's master
// (sharded.go), else one connection through PubSub.Dial.
func (d *Driver[C]) Subscribe(h driver.Handler) driver.Subscription {
	gate := handlergate.New(h)
	if d.lib.PubSub.Sharded == nil {
		return newSubscription(d.lib.PubSub.Dial, gate, d.lib.PubSub.confirmTimeout(), nil, "")
	}
	return &chosenSubscription{ps: d.lib.PubSub, h: gate}
}

// chosenSubscription is a subscription that learns at its first Subscribe
// whether to use sharded pub/sub (PubSub.Sharded), and from then on is
// that subscription.
type chosenSubscription struct {
	ps PubSub
	h  *handlergate.Handler

	mu     sync.Mutex
	sub    driver.Subscription // chosen by the first Subscribe
	closed bool
}

func (c *chosenSubscription) current(ctx context.Context) (driver.Subscription, error) {
	c.mu.Lock()
	closed, sub := c.closed, c.sub
	c.mu.Unlock()
	switch {
	case closed:
		return nil, errClosed
	case sub != nil:
		return sub, nil
	}
	// The probe may wait for the servers: not under mu, which Close takes.
	sharded, err := c.ps.Sharded(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, errClosed
	case c.sub != nil: // another Subscribe chose meanwhile
		return c.sub, nil
	}
	if sharded {
		c.sub = newShardedSubscription(c.ps, c.h)
	} else {
		c.sub = newSubscription(c.ps.Dial, c.h, c.ps.confirmTimeout(), nil, "")
	}
	return c.sub, nil
}

// Subscribe implements driver.Subscription.
func (c *chosenSubscription) Subscribe(ctx context.Context, channels ...string) error {
	sub, err := c.current(ctx)
	if err != nil {
		return err
	}
	return sub.Subscribe(ctx, channels...)
}

// Unsubscribe implements driver.Subscription.
func (c *chosenSubscription) Unsubscribe(ctx context.Context, channels ...string) error {
	c.mu.Lock()
	sub := c.sub
	c.mu.Unlock()
	if sub == nil {
		return nil
	}
	return sub.Unsubscribe(ctx, channels...)
}

// Close implements driver.Subscription.
func (c *chosenSubscription) Close() error {
	c.h.Close()
	c.mu.Lock()
	c.closed = true
	sub := c.sub
	c.mu.Unlock()
	if sub == nil {
		return nil
	}
	return sub.Close()
}

// DedicatedPubSub returns the PubSubConn of a library's dedicated
// connection whose hooks report what it hears (rueidis's and valkey-go's
// SetPubSubHooks): do sends a command built by subscribe or unsubscribe
// for a list of channels, errOf reads its error, lost is Lost and close
// closes the connection.
func DedicatedPubSub[C, R any](do func(context.Context, C) R, subscribe, unsubscribe func(channels ...string) C,
	errOf func(R) error, lost <-chan error, close func()) PubSubConn {
	send := func(ctx context.Context, build func(...string) C, channels []string) error {
		return errOf(do(ctx, build(channels...)))
	}
	return &dedicatedConn{
		subscribe:   func(ctx context.Context, chs []string) error { return send(ctx, subscribe, chs) },
		unsubscribe: func(ctx context.Context, chs []string) error { return send(ctx, unsubscribe, chs) },
		lost:        lost,
		close:       close,
	}
}

type dedicatedConn struct {
	subscribe, unsubscribe func(ctx context.Context, channels []string) error
	lost                   <-chan error
	close                  func()
}

func (c *dedicatedConn) Subscribe(ctx context.Context, channels ...string) error {
	return c.subscribe(ctx, channels)
}

func (c *dedicatedConn) Unsubscribe(ctx context.Context, channels ...string) error {
	return c.unsubscribe(ctx, channels)
}

func (c *dedicatedConn) Lost() <-chan error { return c.lost }

func (c *dedicatedConn) Close() { c.close() }
