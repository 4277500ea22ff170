package goredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/driverkit"
	"github.com/dlock-go/dlock/internal/keyslot"
)

// go-redis's pub/sub under driverkit's subscriptions: a connection is a
// go-redis PubSub read by a goroutine of its own (read), which pings a
// silent connection and reports it lost when the ping goes unanswered too;
// SUBSCRIBE and UNSUBSCRIBE go through a sendGate, since a PubSub holds
// its lock past any context while it connects. On a Cluster whose servers
// have sharded pub/sub, each channel is subscribed with SSUBSCRIBE at its
// slot's master (driverkit's sharded subscription, routed by route).

// healthInterval is how long a connection may stay silent before it pings
// the server; a ping left unanswered for another interval means the
// connection is dead (a half-open TCP connection never errors by itself),
// and the subscription reconnects. It also bounds a new connection's
// resubscription (driverkit.PubSub.ConfirmTimeout).
const healthInterval = 5 * time.Second

// failoverHealthInterval is healthInterval for a Sentinel-managed master's
// client (redis.NewFailoverClient). go-redis moves its command connections
// to a promoted replica on Sentinel's +switch-master, but not a PubSub's:
// after a failover away from a master that stops answering without
// closing its connections (frozen, or cut off), the subscription stays
// there until its health check gives up (two intervals), while releases
// are published on the new master and waiters wake only by their polls. A
// second's silence costs one PING.
const failoverHealthInterval = time.Second

// isFailoverClient reports a client made by redis.NewFailoverClient, whose
// options go-redis names "FailoverClient" in place of an address.
func isFailoverClient(rdb Client) bool {
	c, ok := rdb.(*redis.Client)
	return ok && c.Options().Addr == "FailoverClient"
}

// pubsubLib is the driverkit.Lib's PubSub.
func (d *Driver) pubsubLib() driverkit.PubSub {
	health := healthInterval
	if isFailoverClient(d.rdb) {
		health = failoverHealthInterval
	}
	ps := driverkit.PubSub{
		Dial: func(h driverkit.Hooks) driverkit.PubSubConn {
			return dialPubSub(d.rdb.Subscribe(context.Background()), false, health, h) // no channel: no I/O
		},
		ConfirmTimeout: health,
	}
	if d.cc != nil {
		ps.Sharded, ps.Route, ps.Refresh = d.shardedPubSub, d.route, d.refresh
	}
	return ps
}

// route is the PubSub's Route: the master of channel's slot.
func (d *Driver) route(ctx context.Context, channel string) (driverkit.Shard, error) {
	node, err := d.cc.MasterForKey(ctx, channel)
	if err != nil {
		return driverkit.Shard{}, err
	}
	return driverkit.Shard{Addr: node.Options().Addr, Dial: func(h driverkit.Hooks) driverkit.PubSubConn {
		return dialPubSub(node.SSubscribe(context.Background()), true, healthInterval, h)
	}}, nil
}

// refresh is the PubSub's Refresh: ForEachMaster reloads the Cluster's
// state before it iterates.
func (d *Driver) refresh(ctx context.Context) error {
	return d.cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil })
}

// pubsubConn is a driverkit.PubSubConn over a go-redis PubSub.
//
// Neither a PubSub's calls nor its Close end with a context: a PubSub
// connects (dial, then the handshake, which only the client's read and
// write timeouts bound) inside Subscribe, Ping and ReceiveTimeout (which
// reconnects after a failed read), holding its lock meanwhile, and Close
// waits for that lock. driverkit never waits for Close at its own Close,
// and callers' calls go through the gate, so that they return at their
// context's end. The reader ends once its go-redis call returns after
// Close (a read at once, since Close closes the connection; a connection
// being made when it is made or fails).
type pubsubConn struct {
	ps      *redis.PubSub
	sharded bool // SSUBSCRIBE, one command per slot
	health  time.Duration
	h       driverkit.Hooks
	gate    sendGate
	lost    chan error // capacity 1; closed when the reader ends

	ctx    context.Context // ends with Close: a dial in progress fails at once
	cancel context.CancelFunc
}

func dialPubSub(ps *redis.PubSub, sharded bool, health time.Duration, h driverkit.Hooks) *pubsubConn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &pubsubConn{ps: ps, sharded: sharded, health: health, h: h, gate: newSendGate(),
		lost: make(chan error, 1), ctx: ctx, cancel: cancel}
	go c.read()
	return c
}

// errResubscribed reports a connection that go-redis replaced by itself.
var errResubscribed = errors.New("dlock: go-redis reconnected the subscription by itself")

// read delivers what the connection hears until it fails or is closed.
//
// A PubSub also reconnects by itself: after a read that timed out on a
// master that stopped answering (frozen, or failed over by Sentinel),
// go-redis may dial anew inside the health check's Ping, which only
// writes, and subscribe every channel again. Nothing fails as far as read
// can see, but what was published before the resubscription is gone. So a
// subscribe confirmation heard in place of the Ping's PONG ends the
// connection as lost: driverkit connects again and reports a Reset, and
// waiters ask the server again rather than wait for their next poll.
func (c *pubsubConn) read() {
	defer close(c.lost)
	pinged, awaitingPong := false, false
	for {
		msg, err := c.ps.ReceiveTimeout(c.ctx, c.health)
		if c.ctx.Err() != nil {
			return // closed
		}
		if err != nil {
			if isTimeout(err) && !pinged {
				pinged = true
				if c.ps.Ping(c.ctx) == nil {
					awaitingPong = true
					continue
				}
			}
			_, err = normalize(nil, err) // a closed client: driver.ErrClientClosed
			c.lost <- err
			return
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Message:
			c.h.Message(m.Channel, m.Payload)
		case *redis.Pong:
			awaitingPong = false
		case *redis.Subscription:
			if awaitingPong && (m.Kind == "subscribe" || m.Kind == "ssubscribe") {
				c.lost <- errResubscribed
				return
			}
			c.h.Subscription(m.Kind, m.Channel)
		}
	}
}

func isTimeout(err error) bool {
	var nerr net.Error
	return errors.As(err, &nerr) && nerr.Timeout()
}

// Subscribe implements driverkit.PubSubConn.
func (c *pubsubConn) Subscribe(ctx context.Context, channels ...string) error {
	return c.gate.do(ctx, c.ctx.Done(), func(ctx context.Context) error {
		if !c.sharded {
			return c.ps.Subscribe(ctx, channels...)
		}
		for _, chs := range bySlot(channels) {
			if err := c.ps.SSubscribe(ctx, chs...); err != nil {
				return err
			}
		}
		return nil
	})
}

// Unsubscribe implements driverkit.PubSubConn.
func (c *pubsubConn) Unsubscribe(ctx context.Context, channels ...string) error {
	return c.gate.do(ctx, c.ctx.Done(), func(ctx context.Context) error {
		if !c.sharded {
			return c.ps.Unsubscribe(ctx, channels...)
		}
		for _, chs := range bySlot(channels) {
			if err := c.ps.SUnsubscribe(ctx, chs...); err != nil {
				return err
			}
		}
		return nil
	})
}

// bySlot groups channels by Cluster slot: one SSUBSCRIBE may only name
// channels of a single slot.
func bySlot(channels []string) [][]string {
	var (
		slots []int
		out   [][]string
	)
	for _, ch := range channels {
		s := keyslot.Of(ch)
		i := 0
		for i < len(slots) && slots[i] != s {
			i++
		}
		if i == len(slots) {
			slots, out = append(slots, s), append(out, nil)
		}
		out[i] = append(out[i], ch)
	}
	return out
}

// Lost implements driverkit.PubSubConn.
func (c *pubsubConn) Lost() <-chan error { return c.lost }

// Close implements driverkit.PubSubConn.
func (c *pubsubConn) Close() {
	c.cancel()
	_ = c.ps.Close()
}

// pubsubKind caches which pub/sub a Cluster's servers offer: unknown until
// probed, then plain (PUBLISH, broadcast to every node) or sharded
// (SPUBLISH, delivered by the slot's own nodes; Redis 7.0 and later).
type pubsubKind struct {
	mu      sync.Mutex
	kind    atomic.Int32
	retryAt time.Time // after a failed probe, when to probe again
}

const (
	pubsubUnknown int32 = iota
	pubsubPlain
	pubsubSharded
)

// probeTimeout bounds the probe, and probeRetry spaces probes after one
// failed (the cluster was unreachable): meanwhile PUBLISH is used.
const (
	probeTimeout = 2 * time.Second
	probeRetry   = time.Second
)

// shardedPubSub is the PubSub's Sharded: whether this driver uses sharded
// pub/sub, so that a release notifies only the nodes of the lock's slot
// (plain PUBLISH is broadcast over the cluster bus to every node). Only on
// a Cluster whose servers know SPUBLISH (COMMAND INFO, asked once). The
// answer is kept for the driver's life, so its publishes and its
// subscription always agree. Mixed servers (during an upgrade to 7.0) are
// not supported: the answer is the first node's.
func (d *Driver) shardedPubSub(ctx context.Context) (bool, error) {
	cc, ok := d.rdb.(*redis.ClusterClient)
	if !ok {
		return false, nil
	}
	if k := d.pubsub.kind.Load(); k != pubsubUnknown {
		return k == pubsubSharded, nil
	}
	d.pubsub.mu.Lock()
	defer d.pubsub.mu.Unlock()
	if k := d.pubsub.kind.Load(); k != pubsubUnknown {
		return k == pubsubSharded, nil
	}
	if time.Now().Before(d.pubsub.retryAt) {
		return false, errors.New("dlock: the Cluster could not be asked whether it has sharded pub/sub")
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	info, err := cc.Do(pctx, "command", "info", "spublish").Slice()
	switch {
	case err == nil:
		if len(info) == 1 && info[0] != nil {
			d.pubsub.kind.Store(pubsubSharded)
			return true, nil
		}
		d.pubsub.kind.Store(pubsubPlain)
	case isServerError(err):
		d.pubsub.kind.Store(pubsubPlain) // COMMAND refused (renamed, ACL): stay with what always works
	default:
		d.pubsub.retryAt = time.Now().Add(probeRetry)
		return false, fmt.Errorf("dlock: asking the Cluster whether it has sharded pub/sub: %w", err)
	}
	return false, nil
}
