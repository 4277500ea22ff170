package goredis

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/confirm"
	"github.com/dlock-go/dlock/internal/handlergate"
	"github.com/dlock-go/dlock/internal/keyslot"
)

// Sharded pub/sub on a Cluster.
//
// SSUBSCRIBE must reach a node that serves the channel's slot, and one
// SSUBSCRIBE may only name channels of a single slot. dlock's channels are
// lock keys, so each lives in its lock's slot. The subscription keeps one
// connection (a go-redis PubSub on the master's node client) per master
// that serves a subscribed channel, read by a goroutine of its own, and
// subscribes each slot's channels with a command of their own.
//
// When a slot moves to another master, Redis 7 unsubscribes the old
// master's subscribers of the slot's channels, which arrives as an
// "sunsubscribe" nobody asked for; when a connection breaks (a node died,
// a failover), its channels are left without a subscription. In both cases
// a manager goroutine reloads the Cluster's state, subscribes the channels
// again where they now live, and calls Reset once the server confirmed them,
// because messages published in between are lost.

// confirmTimeout bounds the wait for the server to confirm a subscription;
// a Subscribe that times out fails, and the waiter polls meanwhile.
const confirmTimeout = healthInterval

// clusterSubscription is the Subscription of a Cluster client: sharded when
// the servers have sharded pub/sub, which it learns at the first Subscribe,
// plain otherwise.
type clusterSubscription struct {
	d  *Driver
	cc *redis.ClusterClient
	h  driver.Handler

	mu     sync.Mutex
	sub    driver.Subscription // chosen by the first Subscribe
	closed bool
}

func (c *clusterSubscription) current(ctx context.Context) (driver.Subscription, error) {
	c.mu.Lock()
	closed, sub := c.closed, c.sub
	c.mu.Unlock()
	switch {
	case closed:
		return nil, errClosed
	case sub != nil:
		return sub, nil
	}
	// The probe may wait for the servers (up to go-redis's read timeout):
	// not under mu, which Close takes.
	sharded, err := c.d.shardedPubSub(ctx)
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
		c.sub = newShardedSubscription(c.cc, c.h)
	} else {
		c.sub = newSubscription(c.cc, c.h)
	}
	return c.sub, nil
}

// Subscribe implements driver.Subscription.
func (c *clusterSubscription) Subscribe(ctx context.Context, channels ...string) error {
	sub, err := c.current(ctx)
	if err != nil {
		return err
	}
	return sub.Subscribe(ctx, channels...)
}

// Unsubscribe implements driver.Subscription.
func (c *clusterSubscription) Unsubscribe(ctx context.Context, channels ...string) error {
	c.mu.Lock()
	sub := c.sub
	c.mu.Unlock()
	if sub == nil {
		return nil
	}
	return sub.Unsubscribe(ctx, channels...)
}

// Close implements driver.Subscription.
func (c *clusterSubscription) Close() error {
	c.mu.Lock()
	c.closed = true
	sub := c.sub
	c.mu.Unlock()
	if sub == nil {
		return nil
	}
	return sub.Close()
}

// shardedSubscription subscribes each channel with SSUBSCRIBE at the master
// that serves its slot.
//
// Like subscription (see there), Close waits for no go-redis call: a
// PubSub connecting (dial and handshake) holds its lock, which its Close
// waits for, and the manager and the readers make such calls (SSubscribe,
// Ping, ReceiveTimeout, reloading the Cluster's state). So Close stops the
// Handler calls, tells the goroutines to stop, cancels ctx, and closes each
// connection in a goroutine of its own. What outlives Close belongs to the
// subscription and ends by itself, within go-redis's own timeouts: each
// reader and the manager when its go-redis call returns (at once for a
// read once its PubSub is closed; a dial or handshake in progress at its
// timeout), since they then see stop or their connection dead; each closer
// once it gets its PubSub's lock. No connection is made after Close.
type shardedSubscription struct {
	cc *redis.ClusterClient
	h  *handlergate.Handler // one call at a time, across the goroutines; none after Close

	mu      sync.Mutex
	wanted  map[string]*shardConn // subscribed channels -> where; nil while being placed
	conns   map[string]*shardConn // by master address
	waiting confirm.Waiters
	events  []shardEvent
	started bool // the manager runs
	closed  bool

	wake   chan struct{} // capacity 1: events are queued
	stop   chan struct{}
	ctx    context.Context // ends with Close
	cancel context.CancelFunc
}

// shardConn is the connection to one master.
type shardConn struct {
	addr string
	ps   *redis.PubSub
	send sendGate // orders SSUBSCRIBE and SUNSUBSCRIBE, respecting contexts
	dead bool     // broken or closed: its channels go elsewhere (guarded by mu)
	// unsent (guarded by mu) holds channels not wanted here that may still
	// be subscribed on this connection: their SUNSUBSCRIBE was never sent
	// (its caller left while the gate was taken) or failed. The reader
	// sends it (flushUnsent), as subscription's loop does.
	unsent map[string]struct{}
}

// shardEvent is what a connection's reader tells the manager: the
// connection broke (channel empty), or the server dropped channel because
// its slot moved away.
type shardEvent struct {
	conn    *shardConn
	channel string
}

func newShardedSubscription(cc *redis.ClusterClient, h driver.Handler) *shardedSubscription {
	ctx, cancel := context.WithCancel(context.Background())
	return &shardedSubscription{
		cc:      cc,
		h:       handlergate.New(h),
		wanted:  make(map[string]*shardConn),
		conns:   make(map[string]*shardConn),
		waiting: confirm.Waiters{},
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		ctx:     ctx,
		cancel:  cancel,
	}
}

// Subscribe implements driver.Subscription.
func (s *shardedSubscription) Subscribe(ctx context.Context, channels ...string) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	if !s.started {
		s.started = true
		go s.manage()
	}
	for _, ch := range channels {
		if _, ok := s.wanted[ch]; !ok {
			s.wanted[ch] = nil
		}
	}
	confirmed := s.expectLocked(channels)
	s.mu.Unlock()
	if err := s.place(ctx, channels); err != nil {
		s.forget(channels, confirmed)
		return err
	}
	return s.await(ctx, channels, confirmed)
}

// expectLocked registers a confirmation waiter for each channel.
func (s *shardedSubscription) expectLocked(channels []string) []chan struct{} {
	return s.waiting.Expect(channels)
}

// await waits for the server to confirm every channel, at most
// confirmTimeout.
func (s *shardedSubscription) await(ctx context.Context, channels []string, confirmed []chan struct{}) error {
	timer := time.NewTimer(confirmTimeout)
	defer timer.Stop()
	for _, c := range confirmed {
		select {
		case <-c:
		case <-ctx.Done():
			s.forget(channels, confirmed)
			return ctx.Err()
		case <-timer.C:
			s.forget(channels, confirmed)
			return fmt.Errorf("dlock: no confirmation of SSUBSCRIBE within %v", confirmTimeout)
		case <-s.stop:
			return errClosed
		}
	}
	return nil
}

// forget drops the confirmation waiters of a subscribe that failed.
func (s *shardedSubscription) forget(channels []string, confirmed []chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting.Forget(channels, confirmed)
}

// place sends SSUBSCRIBE for channels to the masters that serve them now,
// as far as the client's view of the Cluster knows, one command per slot.
// Channels unsubscribed meanwhile are skipped.
func (s *shardedSubscription) place(ctx context.Context, channels []string) error {
	type group struct {
		node  *redis.Client
		slots map[int][]string
	}
	groups := make(map[string]*group)
	for _, ch := range channels {
		node, err := s.cc.MasterForKey(ctx, ch)
		if err != nil {
			return err
		}
		addr := node.Options().Addr
		g := groups[addr]
		if g == nil {
			g = &group{node: node, slots: make(map[int][]string)}
			groups[addr] = g
		}
		slot := keyslot.Of(ch)
		g.slots[slot] = append(g.slots[slot], ch)
	}
	type send struct {
		conn *shardConn
		chs  []string
	}
	var sends []send
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	for addr, g := range groups {
		conn := s.conns[addr]
		if conn == nil {
			conn = &shardConn{addr: addr, ps: g.node.SSubscribe(context.Background()), send: newSendGate(),
				unsent: make(map[string]struct{})}
			s.conns[addr] = conn
			go s.read(conn)
		}
		for _, chs := range g.slots {
			var keep []string
			for _, ch := range chs {
				if _, ok := s.wanted[ch]; ok {
					s.wanted[ch] = conn
					keep = append(keep, ch)
				}
			}
			if len(keep) > 0 {
				sends = append(sends, send{conn, keep})
			}
		}
	}
	s.mu.Unlock()
	var first error
	for _, sd := range sends {
		ps, chs := sd.conn.ps, sd.chs
		err := sd.conn.send.do(ctx, s.stop, func(ctx context.Context) error { return ps.SSubscribe(ctx, chs...) })
		if err != nil {
			if ctx.Err() == nil && err != errClosed {
				// The connection failed (a caller that left, or Close,
				// tells nothing about it): the manager replaces it.
				s.report(shardEvent{conn: sd.conn})
			}
			if first == nil {
				first = err
			}
		}
	}
	return first
}

// Unsubscribe implements driver.Subscription.
func (s *shardedSubscription) Unsubscribe(ctx context.Context, channels ...string) error {
	type key struct {
		conn *shardConn
		slot int
	}
	groups := make(map[key][]string)
	s.mu.Lock()
	for _, ch := range channels {
		conn, ok := s.wanted[ch]
		delete(s.wanted, ch)
		if ok && conn != nil && !conn.dead {
			k := key{conn, keyslot.Of(ch)}
			groups[k] = append(groups[k], ch)
		}
	}
	s.mu.Unlock()
	var first error
	for k, chs := range groups {
		ps, chs := k.conn.ps, chs
		if err := k.conn.send.do(ctx, s.stop, func(ctx context.Context) error { return ps.SUnsubscribe(ctx, chs...) }); err != nil {
			s.mu.Lock()
			s.markUnsentLocked(k.conn, chs)
			s.mu.Unlock()
			if first == nil {
				first = err
			}
		}
	}
	return first
}

// markUnsentLocked adds to conn's unsent those of channels not wanted on it.
func (s *shardedSubscription) markUnsentLocked(conn *shardConn, channels []string) {
	for _, ch := range channels {
		if s.wanted[ch] != conn {
			conn.unsent[ch] = struct{}{}
		}
	}
}

// flushUnsent sends SUNSUBSCRIBE on conn for the channels in its unsent
// that are still not wanted there, one command per slot. It takes conn's
// gate, so that an SSUBSCRIBE placing one of them there goes after it, but
// never waits for it: a caller holds it, and the reader tries again after
// its next read.
func (s *shardedSubscription) flushUnsent(conn *shardConn) {
	s.mu.Lock()
	empty := len(conn.unsent) == 0
	s.mu.Unlock()
	if empty {
		return
	}
	select {
	case conn.send <- struct{}{}:
	default:
		return
	}
	defer func() { <-conn.send }()
	slots := make(map[int][]string)
	s.mu.Lock()
	for ch := range conn.unsent {
		if s.wanted[ch] != conn {
			slots[keyslot.Of(ch)] = append(slots[keyslot.Of(ch)], ch)
		}
	}
	clear(conn.unsent)
	s.mu.Unlock()
	for _, chs := range slots {
		ctx, cancel := context.WithTimeout(s.ctx, healthInterval)
		err := conn.ps.SUnsubscribe(ctx, chs...)
		cancel()
		if err != nil {
			s.mu.Lock()
			s.markUnsentLocked(conn, chs)
			s.mu.Unlock()
		}
	}
}

// Close implements driver.Subscription. From its start no Handler method is
// called any more. It returns at once: each connection is closed by a
// goroutine of its own, and the manager and the readers stop by themselves
// (see shardedSubscription).
func (s *shardedSubscription) Close() error {
	s.h.Close()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	s.cancel()
	conns := make([]*shardConn, 0, len(s.conns))
	for _, c := range s.conns {
		c.dead = true
		conns = append(conns, c)
	}
	s.conns = nil
	s.mu.Unlock()
	for _, c := range conns {
		// Each on its own: one being connected must not hold up the others.
		go func(ps *redis.PubSub) { _ = ps.Close() }(c.ps)
	}
	return nil
}

// read reads one master's connection until it breaks or is closed.
func (s *shardedSubscription) read(conn *shardConn) {
	pinged := false
	for {
		s.flushUnsent(conn)
		msg, err := conn.ps.ReceiveTimeout(s.ctx, healthInterval)
		if s.isDead(conn) {
			return
		}
		if err != nil {
			if isTimeout(err) && !pinged {
				pinged = true
				if conn.ps.Ping(s.ctx) == nil {
					continue
				}
			}
			s.report(shardEvent{conn: conn})
			return
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Message:
			s.h.Message(m.Channel, m.Payload)
		case *redis.Subscription:
			switch m.Kind {
			case "ssubscribe":
				s.confirm(m.Channel)
			case "sunsubscribe":
				// Ours, if the channel is still wanted here: the server
				// dropped it because its slot moved to another master.
				s.mu.Lock()
				moved := s.wanted[m.Channel] == conn
				s.mu.Unlock()
				if moved {
					s.report(shardEvent{conn: conn, channel: m.Channel})
				}
			}
		}
	}
}

func (s *shardedSubscription) isDead(conn *shardConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return conn.dead
}

func (s *shardedSubscription) confirm(channel string) {
	s.mu.Lock()
	list := s.waiting.Take(channel)
	s.mu.Unlock()
	for _, c := range list {
		close(c)
	}
}

// report queues an event for the manager.
func (s *shardedSubscription) report(ev shardEvent) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.events = append(s.events, ev)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// lost is a channel left without a subscription, and the master it was
// dropped by when its slot moved ("" when its connection broke).
type lost struct{ movedFrom string }

// manage re-subscribes channels that lost their subscription, until Close.
func (s *shardedSubscription) manage() {
	pending := make(map[string]lost)
	backoff := newBackoff()
	for {
		if len(pending) == 0 {
			select {
			case <-s.wake:
			case <-s.stop:
				return
			}
		}
		for ch, l := range s.collect() {
			pending[ch] = l
		}
		if len(pending) == 0 {
			continue
		}
		if s.resubscribe(pending) {
			pending = make(map[string]lost)
			backoff.reset()
			s.h.Reset()
			continue
		}
		if !backoff.sleep(s.stop) {
			return
		}
	}
}

// collect applies the queued events: broken connections are closed and
// forgotten, and every channel they carried, like every channel a master
// dropped, is returned to be subscribed again.
func (s *shardedSubscription) collect() map[string]lost {
	s.mu.Lock()
	events := s.events
	s.events = nil
	out := make(map[string]lost)
	var closing []*shardConn
	for _, ev := range events {
		if ev.channel != "" {
			if s.wanted[ev.channel] == ev.conn && !ev.conn.dead {
				s.wanted[ev.channel] = nil
				out[ev.channel] = lost{movedFrom: ev.conn.addr}
			}
			continue
		}
		if !ev.conn.dead {
			ev.conn.dead = true
			closing = append(closing, ev.conn)
			if s.conns[ev.conn.addr] == ev.conn {
				delete(s.conns, ev.conn.addr)
			}
		}
		// Also after it was closed: a Subscribe may have placed channels
		// on it just before.
		for ch, c := range s.wanted {
			if c == ev.conn {
				s.wanted[ch] = nil
				out[ch] = lost{}
			}
		}
	}
	s.mu.Unlock()
	for _, c := range closing {
		// In a goroutine of its own, as in Close: PubSub.Close waits for
		// the PubSub's lock, which its reader holds while it reconnects
		// (up to the client's dial and read timeouts), and the manager
		// must meanwhile place the other channels lost.
		go func(ps *redis.PubSub) { _ = ps.Close() }(c.ps)
	}
	return out
}

// resubscribe subscribes the pending channels (those still wanted and not
// placed again meanwhile) where they live now, and waits for the server's
// confirmation; false if that failed, to be tried again.
func (s *shardedSubscription) resubscribe(pending map[string]lost) bool {
	ctx, cancel := context.WithTimeout(s.ctx, 2*confirmTimeout)
	defer cancel()
	s.refreshState(ctx, pending)
	var channels []string
	s.mu.Lock()
	for ch := range pending {
		if c, ok := s.wanted[ch]; ok && c == nil {
			channels = append(channels, ch)
		}
	}
	if len(channels) == 0 {
		s.mu.Unlock()
		return true
	}
	confirmed := s.expectLocked(channels)
	s.mu.Unlock()
	if err := s.place(ctx, channels); err != nil {
		s.forget(channels, confirmed)
		return false
	}
	return s.await(ctx, channels, confirmed) == nil
}

// refreshState reloads the client's view of the Cluster (ForEachMaster
// reloads it first), again for a while when a channel whose slot moved
// still maps to the master that dropped it: the node asked may not know of
// the move yet.
func (s *shardedSubscription) refreshState(ctx context.Context, pending map[string]lost) {
	for try := 0; try < 10; try++ {
		if err := s.cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil }); err != nil {
			return
		}
		stale := false
		for ch, l := range pending {
			if l.movedFrom == "" {
				continue
			}
			node, err := s.cc.MasterForKey(ctx, ch)
			if err == nil && node.Options().Addr == l.movedFrom {
				stale = true
				break
			}
		}
		if !stale || !sleepCtx(ctx, 50*time.Millisecond) {
			return
		}
	}
}
