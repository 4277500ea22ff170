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
)

// healthInterval is how long the subscription may stay silent before it
// pings the server; a ping left unanswered for another interval means the
// connection is dead (a half-open TCP connection never errors by itself),
// and the subscription reconnects.
const healthInterval = 5 * time.Second

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
	return &subscription{
		rdb:      rdb,
		h:        h,
		channels: make(map[string]struct{}),
		waiting:  confirm.Waiters{},
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
}

// subscription multiplexes every channel of one dlock Client over a single
// go-redis PubSub connection, read by one goroutine it owns.
type subscription struct {
	rdb Client
	h   driver.Handler

	mu       sync.Mutex
	ps       *redis.PubSub
	channels map[string]struct{}
	waiting  confirm.Waiters // confirmations awaited, per channel
	started  bool
	closed   bool

	stop chan struct{}
	done chan struct{}
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
		s.ps = s.rdb.Subscribe(context.Background())
		go s.loop()
	}
	confirmed := s.waiting.Expect(channels)
	for _, ch := range channels {
		s.channels[ch] = struct{}{}
	}
	ps := s.ps
	s.mu.Unlock()

	if err := ps.Subscribe(ctx, channels...); err != nil {
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

// Unsubscribe implements driver.Subscription.
func (s *subscription) Unsubscribe(ctx context.Context, channels ...string) error {
	s.mu.Lock()
	ps := s.ps
	for _, ch := range channels {
		delete(s.channels, ch)
	}
	s.mu.Unlock()
	if ps == nil {
		return nil
	}
	return ps.Unsubscribe(ctx, channels...)
}

// Close implements driver.Subscription.
func (s *subscription) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	ps, started := s.ps, s.started
	s.mu.Unlock()
	if !started {
		return nil
	}
	err := ps.Close()
	<-s.done
	return err
}

var errClosed = errors.New("dlock: subscription closed")

// loop reads the connection until Close. After any failure it reports a
// Reset once the connection works again, because go-redis resubscribes on
// reconnect but whatever was published in between is gone.
func (s *subscription) loop() {
	defer close(s.done)
	ctx := context.Background()
	broken := false
	pinged := false
	backoff := newBackoff()
	for {
		s.mu.Lock()
		ps := s.ps
		s.mu.Unlock()
		msg, err := ps.ReceiveTimeout(ctx, healthInterval)
		select {
		case <-s.stop:
			return
		default:
		}
		if err != nil {
			if isTimeout(err) && !pinged {
				pinged = true
				if perr := ps.Ping(ctx); perr == nil {
					continue
				}
			}
			// Dead or silent connection: start over on a fresh one, which
			// subscribes to every channel again.
			broken, pinged = true, false
			s.replace()
			if !backoff.sleep(s.stop) {
				return
			}
			continue
		}
		pinged = false
		backoff.reset()
		if broken {
			broken = false
			s.h.Reset()
		}
		switch m := msg.(type) {
		case *redis.Message:
			s.h.Message(m.Channel, m.Payload)
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				s.confirm(m.Channel)
			}
		}
	}
}

// replace swaps in a new PubSub with every current channel.
func (s *subscription) replace() {
	s.mu.Lock()
	old := s.ps
	channels := make([]string, 0, len(s.channels))
	for ch := range s.channels {
		channels = append(channels, ch)
	}
	s.ps = s.rdb.Subscribe(context.Background())
	ps := s.ps
	s.mu.Unlock()
	_ = old.Close()
	if len(channels) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), healthInterval)
		_ = ps.Subscribe(ctx, channels...) // on failure the next receive fails and we come back here
		cancel()
	}
}

func (s *subscription) confirm(channel string) {
	s.mu.Lock()
	list := s.waiting.Take(channel)
	s.mu.Unlock()
	for _, c := range list {
		close(c)
	}
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
