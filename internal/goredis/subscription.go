package goredis

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/confirm"
	"github.com/dlock-go/dlock/internal/handlergate"
)

// healthInterval is how long the subscription may stay silent before it
// pings the server; a ping left unanswered for another interval means the
// connection is dead (a half-open TCP connection never errors by itself),
// and the subscription reconnects.
const healthInterval = 5 * time.Second

// failoverHealthInterval is healthInterval for a Sentinel-managed master's
// client (redis.NewFailoverClient). go-redis moves its command connections
// to a promoted replica on Sentinel's +switch-master, but not a PubSub's:
// after a failover away from a master that stopped answering without
// closing its connections (frozen, or cut off), the subscription stayed
// there until its health check gave up, about 10 s, while releases were
// published on the new master and waiters woke only by their polls. A
// second's silence costs one PING.
const failoverHealthInterval = time.Second

// isFailoverClient reports a client made by redis.NewFailoverClient, whose
// options go-redis names "FailoverClient" in place of an address.
func isFailoverClient(rdb Client) bool {
	c, ok := rdb.(*redis.Client)
	return ok && c.Options().Addr == "FailoverClient"
}

// Subscribe implements driver.Driver. On a Cluster whose servers have
// sharded pub/sub the subscription uses SSUBSCRIBE at each channel's master
// (sharded.go); elsewhere SUBSCRIBE on one connection.
func (d *Driver) Subscribe(h driver.Handler) driver.Subscription {
	if cc, ok := d.rdb.(*redis.ClusterClient); ok {
		return &clusterSubscription{d: d, cc: cc, h: h}
	}
	return newSubscription(d.rdb, h)
}

func newSubscription(rdb Client, h driver.Handler) *subscription {
	ctx, cancel := context.WithCancel(context.Background())
	health := healthInterval
	if isFailoverClient(rdb) {
		health = failoverHealthInterval
	}
	return &subscription{
		rdb:      rdb,
		health:   health,
		h:        handlergate.New(h),
		ctx:      ctx,
		cancel:   cancel,
		channels: make(map[string]struct{}),
		unsent:   make(map[string]struct{}),
		waiting:  confirm.Waiters{},
		send:     newSendGate(),
		stop:     make(chan struct{}),
	}
}

// subscription multiplexes every channel of one dlock Client over a single
// go-redis PubSub connection, read by one goroutine it owns, loop, which
// replaces the PubSub when its connection fails.
//
// Close must return promptly even when the server stopped answering, but
// some go-redis calls end neither with their context nor when the PubSub is
// closed: a PubSub connects (dial, then the handshake, which only the
// client's read and write timeouts bound) inside Subscribe, Ping and
// ReceiveTimeout (which reconnects after a failed read), holding its lock
// meanwhile, and PubSub.Close waits for that lock. So Close waits neither
// for the loop nor for PubSub.Close: it stops the Handler calls, tells the
// loop to stop, cancels the context of the loop's calls (which ends a dial
// still connecting), and closes the PubSub in a goroutine of its own.
//
// What outlives Close belongs to the subscription and ends by itself,
// within go-redis's own timeouts: that closer once it gets the PubSub's
// lock, that is once the call holding it returns, and the loop once its
// current call returns (a read at once when the closer has closed the
// connection, a handshake at the read timeout or as soon as the server
// answers), since it then sees stop. After Close the loop makes no new
// PubSub, so the closer's is the last one.
type subscription struct {
	rdb    Client
	h      *handlergate.Handler // no call after Close
	health time.Duration        // healthInterval, or failoverHealthInterval

	// ctx ends at Close: the loop's go-redis calls use it, so that a dial
	// still connecting then fails at once.
	ctx    context.Context
	cancel context.CancelFunc

	// send orders the callers' SUBSCRIBE and UNSUBSCRIBE calls and keeps
	// their contexts in force while a reconnection holds the PubSub.
	send sendGate

	mu       sync.Mutex
	ps       *redis.PubSub // swapped by the loop only
	channels map[string]struct{}
	waiting  confirm.Waiters // confirmations awaited, per channel
	// unsent holds channels no longer wanted that may still be subscribed
	// on the connection in use: their UNSUBSCRIBE was never sent (its
	// caller left while the gate was taken) or failed, or a reconnection
	// subscribed them again as it was sent. The loop sends it (flushUnsent).
	// Left there, the server would send their messages to this client for
	// the connection's life.
	unsent  map[string]struct{}
	started bool
	closed  bool

	stop chan struct{}
}

// Subscribe implements driver.Subscription.
func (s *subscription) Subscribe(ctx context.Context, channels ...string) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	if !s.started {
		s.started = true
		s.ps = s.rdb.Subscribe(context.Background()) // no channel: no I/O
		go s.loop(s.ps)
	}
	confirmed := s.waiting.Expect(channels)
	for _, ch := range channels {
		s.channels[ch] = struct{}{}
	}
	ps := s.ps
	s.mu.Unlock()

	if err := s.send.do(ctx, s.stop, func(ctx context.Context) error { return ps.Subscribe(ctx, channels...) }); err != nil {
		s.forget(channels, confirmed)
		return err
	}
	for _, c := range confirmed {
		select {
		case <-c:
		case <-ctx.Done():
			s.forget(channels, confirmed)
			return ctx.Err()
		case <-s.stop:
			return errClosed
		}
	}
	return nil
}

// forget drops confirmation waiters of a subscribe attempt that failed.
func (s *subscription) forget(channels []string, confirmed []chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting.Forget(channels, confirmed)
}

// Unsubscribe implements driver.Subscription. After Close it returns
// errClosed, without waiting for the PubSub Close is closing.
func (s *subscription) Unsubscribe(ctx context.Context, channels ...string) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	ps := s.ps
	for _, ch := range channels {
		delete(s.channels, ch)
	}
	s.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := s.send.do(ctx, s.stop, func(ctx context.Context) error { return ps.Unsubscribe(ctx, channels...) })
	if err != nil {
		s.mu.Lock()
		s.markUnsentLocked(channels)
		s.mu.Unlock()
	}
	return err
}

// markUnsentLocked adds to unsent those of channels no longer wanted.
func (s *subscription) markUnsentLocked(channels []string) {
	for _, ch := range channels {
		if _, wanted := s.channels[ch]; !wanted {
			s.unsent[ch] = struct{}{}
		}
	}
}

// flushUnsent sends UNSUBSCRIBE on ps, the PubSub in use, for the channels
// in unsent that are still not wanted. It takes the gate, so that a caller's
// SUBSCRIBE for one of them goes after it, but never waits for it: a caller
// holds it, and the loop tries again after its next read.
func (s *subscription) flushUnsent(ps *redis.PubSub) {
	s.mu.Lock()
	empty := len(s.unsent) == 0
	s.mu.Unlock()
	if empty {
		return
	}
	select {
	case s.send <- struct{}{}:
	default:
		return
	}
	defer func() { <-s.send }()
	s.mu.Lock()
	var chs []string
	for ch := range s.unsent {
		if _, wanted := s.channels[ch]; !wanted {
			chs = append(chs, ch)
		}
	}
	clear(s.unsent)
	s.mu.Unlock()
	if len(chs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.health)
	defer cancel()
	if err := ps.Unsubscribe(ctx, chs...); err != nil {
		s.mu.Lock()
		s.markUnsentLocked(chs)
		s.mu.Unlock()
	}
}

// Close implements driver.Subscription. From its start no Handler method is
// called any more. It returns at once: the PubSub is closed by a goroutine
// of its own, and the loop stops by itself (see subscription).
func (s *subscription) Close() error {
	s.h.Close()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	s.cancel()
	ps := s.ps
	s.mu.Unlock()
	if ps != nil {
		// PubSub.Close waits for the PubSub's lock, which a connection
		// being made holds until its dial or handshake ends.
		go func() { _ = ps.Close() }()
	}
	return nil
}

var errClosed = errors.New("dlock: subscription closed")

// loop reads ps, and the PubSubs that replace it, until Close. After any
// failure it reports a Reset once the connection works again, because
// go-redis resubscribes on reconnect but whatever was published in between
// is gone. Close does not wait for it (see subscription).
//
// go-redis may also reconnect a PubSub by itself, inside ReceiveTimeout or
// Ping, after a read that timed out on a connection it then finds unusable
// (one to a master frozen or cut off during a failover): the Ping, which
// only writes, then succeeds on the new connection, and nothing failed as
// far as the loop can see. The new connection's subscribe confirmations
// tell: after a failed read, one that no caller awaits means the channels
// were subscribed again, and the loop reports a Reset: a grant published
// before the resubscription is gone, and its waiter would otherwise wait
// for its next poll. A read that merely timed out on a silent connection
// brings a PONG and no confirmation, and no Reset.
func (s *subscription) loop(ps *redis.PubSub) {
	broken := false
	pinged := false
	toldClosed := false
	// suspect: a read failed since the last Reset, so go-redis may have
	// reconnected by itself.
	suspect := false
	backoff := newBackoff()
	for {
		s.flushUnsent(ps)
		msg, err := ps.ReceiveTimeout(s.ctx, s.health)
		if s.stopped() {
			return
		}
		if err != nil {
			suspect = true
			if errors.Is(err, redis.ErrClosed) && !toldClosed {
				// The go-redis client was closed: nothing it sends can
				// succeed again. Waiters ask the server again now, and
				// each learns it from its own attempt, not at its next
				// poll.
				toldClosed = true
				s.h.Reset()
			}
			if isTimeout(err) && !pinged {
				pinged = true
				if perr := ps.Ping(s.ctx); perr == nil {
					continue
				}
			}
			// Dead or silent connection: start over on a fresh one, which
			// subscribes to every channel again.
			broken, pinged = true, false
			var ok bool
			if ps, ok = s.replace(ps); !ok || !backoff.sleep(s.stop) {
				return
			}
			continue
		}
		pinged = false
		backoff.reset()
		if broken {
			broken, suspect = false, false
			s.h.Reset()
		}
		switch m := msg.(type) {
		case *redis.Message:
			s.h.Message(m.Channel, m.Payload)
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				if !s.confirm(m.Channel) && suspect {
					suspect = false
					s.h.Reset() // go-redis subscribed again on a new connection
				}
			}
		}
	}
}

// stopped reports whether Close was called.
func (s *subscription) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// replace swaps in a new PubSub for old, with every current channel, and
// closes old; false after Close, which closes the PubSub in use itself.
func (s *subscription) replace(old *redis.PubSub) (*redis.PubSub, bool) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, false
	}
	channels := make([]string, 0, len(s.channels))
	for ch := range s.channels {
		channels = append(channels, ch)
	}
	ps := s.rdb.Subscribe(context.Background()) // no channel: no I/O
	s.ps = ps
	s.mu.Unlock()
	_ = old.Close()
	if len(channels) > 0 {
		ctx, cancel := context.WithTimeout(s.ctx, s.health)
		_ = ps.Subscribe(ctx, channels...) // on failure the next receive fails and we come back here
		cancel()
		// A caller's UNSUBSCRIBE of one of them may have gone first.
		s.mu.Lock()
		s.markUnsentLocked(channels)
		s.mu.Unlock()
	}
	return ps, true
}

// confirm wakes the callers awaiting channel's confirmation, and reports
// whether there were any.
func (s *subscription) confirm(channel string) bool {
	s.mu.Lock()
	list := s.waiting.Take(channel)
	s.mu.Unlock()
	for _, c := range list {
		close(c)
	}
	return len(list) > 0
}

func isTimeout(err error) bool {
	var nerr net.Error
	return errors.As(err, &nerr) && nerr.Timeout()
}

// backoff spaces reconnection attempts: 10 ms doubling up to 1 s.
type backoff struct{ next time.Duration }

func newBackoff() *backoff { return &backoff{next: 10 * time.Millisecond} }

func (b *backoff) reset() { b.next = 10 * time.Millisecond }

// sleep waits for the current delay; false when stop closed first.
func (b *backoff) sleep(stop <-chan struct{}) bool {
	t := time.NewTimer(b.next)
	defer t.Stop()
	if b.next *= 2; b.next > time.Second {
		b.next = time.Second
	}
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}
