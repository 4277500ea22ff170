package driverkit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/confirm"
	"github.com/dlock-go/dlock/internal/handlergate"
)

// closeTimeout bounds the wait, after closing a failed connection, for the
// library to stop calling the hooks. Close ends the wait at once.
const closeTimeout = 5 * time.Second

// errRetired is a sharded subscription's connection that has ended: its
// channels went back to the sharded subscription, which places them again.
var errRetired = errors.New("dlock: pub/sub connection to a Cluster master ended")

// subscription is the one pub/sub state machine: it multiplexes a set of
// channels over one dedicated connection, which one goroutine, loop,
// opens, subscribes to the whole set, watches and replaces when it fails
// (loop.go). The library's hooks deliver messages; calls to the Handler
// are serialized by h.
//
// It serves in two ways. Alone (owner nil) it is a plain subscription
// that reconnects for ever and reports a Reset once a new connection has
// confirmed its channels. Under a shardedSubscription (owner) it is the
// connection to one master: when the connection ends, or the server drops
// a channel whose slot moved, it hands the channels back to its owner,
// which places them where they live now; after its connection ends it
// retires.
//
// Close must return promptly even when the server stopped answering, but
// libraries have calls that take no context or ignore its cancellation:
// rueidis's Dedicate dials and sends its handshake without one, bounded by
// the dial timeout only, a go-redis PubSub holds its lock while it
// connects, and closing a connection may wait for the server. So the loop
// makes those calls in helper goroutines (connect and drop) and itself
// only ever waits in selects that Close ends. The helpers that outlive
// Close belong to the subscription and end by themselves once the library
// returns: the one that holds the last connection, after closing it, and
// one sending UNSUBSCRIBE (flush).
type subscription struct {
	dial           func(Hooks) PubSubConn
	h              *handlergate.Handler // one call at a time; none after Close
	confirmTimeout time.Duration        // PubSub.ConfirmTimeout
	owner          *shardedSubscription // nil for a plain subscription
	addr           string               // the master, under an owner

	// life ends at Close: its ctx ends the subscribe commands in flight,
	// the callers' and the loop's, and its stop the loop's waits.
	life

	// send is a semaphore held while the channel set changes and the
	// matching SUBSCRIBE or UNSUBSCRIBE is sent, so commands reach the
	// connection in the order of the changes. Unlike a mutex, waiting for
	// it respects a context.
	send chan struct{}

	mu       sync.Mutex
	conn     PubSubConn // the connection in use; nil while (re)connecting
	channels map[string]struct{}
	waiting  confirm.Waiters // confirmations awaited, per channel
	// unsent holds channels no longer wanted that may still be subscribed
	// on conn: their UNSUBSCRIBE was never sent (its caller left while the
	// gate was taken) or failed. The loop has them sent (flush); a new
	// connection subscribes to the set only, and forgets them.
	unsent  map[string]struct{}
	kick    chan struct{} // capacity 1: unsent has channels
	failed  chan struct{} // closed when the current connection (attempt) fails
	started bool
	retired bool // under an owner: the connection ended, the channels went back

	// toldClosed: the Handler was told that the library's client is closed.
	toldClosed atomic.Bool

	done chan struct{} // closed when the loop returns
}

func newSubscription(dial func(Hooks) PubSubConn, h *handlergate.Handler, confirmTimeout time.Duration, owner *shardedSubscription, addr string) *subscription {
	return &subscription{
		dial:           dial,
		h:              h,
		confirmTimeout: confirmTimeout,
		owner:          owner,
		addr:           addr,
		life:           newLife(),
		send:           make(chan struct{}, 1),
		channels:       make(map[string]struct{}),
		unsent:         make(map[string]struct{}),
		kick:           make(chan struct{}, 1),
		waiting:        confirm.Waiters{},
		failed:         make(chan struct{}),
		done:           make(chan struct{}),
	}
}

// Subscribe implements driver.Subscription. It returns an error when the
// server refuses, or when ctx ends or the connection fails before the
// server confirmed: the caller then knows that messages may not arrive,
// and may try again later. Channels the server did not refuse stay in the
// set until Unsubscribe: the connections that follow subscribe to them,
// and their Reset tells the caller. Close ends it with errClosed, even
// while the library is still sending; a retired connection, with
// errRetired.
func (s *subscription) Subscribe(ctx context.Context, channels ...string) error {
	if len(channels) == 0 {
		return nil
	}
	if err := s.lockSend(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed || s.retired {
		err := errClosed
		if !s.closed {
			err = errRetired
		}
		s.mu.Unlock()
		s.unlockSend()
		return err
	}
	var added []string
	for _, ch := range channels {
		if _, ok := s.channels[ch]; !ok {
			s.channels[ch] = struct{}{}
			added = append(added, ch)
		}
	}
	confirmed := s.waiting.Expect(channels)
	conn, failed := s.conn, s.failed
	if !s.started {
		s.started = true
		go s.loop()
	}
	s.mu.Unlock()

	// Without a connection, the loop is making one: it subscribes to the
	// whole set, these channels included.
	var err error
	if conn != nil {
		err = s.untilClosed(ctx, func(ctx context.Context) error { return conn.Subscribe(ctx, channels...) })
	}
	s.unlockSend()
	if err == nil {
		err = s.await(ctx, confirmed, failed, nil)
	}
	if err != nil {
		s.mu.Lock()
		s.waiting.Forget(channels, confirmed)
		if _, refused := replyMsg(err); refused {
			// Kept, every new connection would ask again, and fail.
			for _, ch := range added {
				delete(s.channels, ch)
			}
		}
		s.mu.Unlock()
		settleDeadline(ctx, err)
		return err
	}
	return nil
}

// Unsubscribe implements driver.Subscription. After Close it returns
// errClosed.
func (s *subscription) Unsubscribe(ctx context.Context, channels ...string) error {
	if len(channels) == 0 {
		return nil
	}
	if err := s.lockSend(ctx); err != nil {
		// Left in the set, the channel would stay subscribed on this
		// connection and on every one after it.
		s.mu.Lock()
		for _, ch := range channels {
			delete(s.channels, ch)
		}
		s.markUnsentLocked(channels)
		s.mu.Unlock()
		return err
	}
	defer s.unlockSend()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	for _, ch := range channels {
		delete(s.channels, ch)
	}
	conn := s.conn
	s.mu.Unlock()
	if conn == nil {
		return nil // the next connection subscribes to the set only
	}
	err := s.untilClosed(ctx, func(ctx context.Context) error { return conn.Unsubscribe(ctx, channels...) })
	if err != nil {
		s.mu.Lock()
		s.markUnsentLocked(channels)
		s.mu.Unlock()
	}
	return err
}

// markUnsentLocked adds to unsent those of channels no longer wanted, for
// the loop to have sent (flush).
func (s *subscription) markUnsentLocked(channels []string) {
	if s.closed {
		return
	}
	for _, ch := range channels {
		if _, wanted := s.channels[ch]; !wanted {
			s.unsent[ch] = struct{}{}
		}
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// flush sends UNSUBSCRIBE on conn, through the gate, for the channels in
// unsent that are still not wanted, if conn is still the connection in
// use. It runs in a helper goroutine of the loop's (watch), since the
// library may not end the call with its context; Close ends its wait for
// the gate.
func (s *subscription) flush(conn PubSubConn) {
	if s.lockSend(s.ctx) != nil {
		return
	}
	defer s.unlockSend()
	s.mu.Lock()
	var chs []string
	if s.conn == conn {
		for ch := range s.unsent {
			if _, wanted := s.channels[ch]; !wanted {
				chs = append(chs, ch)
			}
		}
	}
	clear(s.unsent)
	s.mu.Unlock()
	if len(chs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.confirmTimeout)
	defer cancel()
	if err := conn.Unsubscribe(ctx, chs...); err != nil {
		// Kept, but not kicked again: a connection that fails this is
		// likely lost, and its successor subscribes to the set only.
		s.mu.Lock()
		for _, ch := range chs {
			if _, wanted := s.channels[ch]; !wanted {
				s.unsent[ch] = struct{}{}
			}
		}
		s.mu.Unlock()
	}
}

// untilClosed calls send with a context that ends with ctx or at Close,
// and reports a failure that Close caused as errClosed.
func (s *subscription) untilClosed(ctx context.Context, send func(context.Context) error) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	err := send(sctx)
	if err != nil && ctx.Err() == nil && s.ctx.Err() != nil {
		return errClosed
	}
	return err
}

// Close implements driver.Subscription. From its start no Handler method is
// called any more (a plain subscription's; under an owner, the owner's
// Close sees to it). It cancels the subscribe commands in flight and
// returns once the loop has stopped, which is at once: the loop only ever
// waits in selects that Close ends. The connection is closed by the loop's
// helper goroutine, which may still be running: it waits for the library
// (a dial, a subscribe on a connection not made yet, closing the
// connection), and ends by itself when the library returns (see connect
// and drop).
func (s *subscription) Close() error {
	if s.owner == nil {
		s.h.Close()
	}
	s.mu.Lock()
	if !s.endLocked() {
		s.mu.Unlock()
		return nil
	}
	started := s.started
	s.mu.Unlock()
	if started {
		<-s.done
	}
	return nil
}

func (s *subscription) lockSend(ctx context.Context) error {
	select {
	case s.send <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop:
		return errClosed
	}
}

func (s *subscription) unlockSend() { <-s.send }

// life is what a subscription's Close ends, for the goroutines and calls
// it started: stop closes and ctx is cancelled, once.
type life struct {
	ctx    context.Context
	cancel context.CancelFunc
	stop   chan struct{}
	closed bool // guarded by the owner's mutex
}

func newLife() life {
	ctx, cancel := context.WithCancel(context.Background())
	return life{ctx: ctx, cancel: cancel, stop: make(chan struct{})}
}

// endLocked ends l, with its owner's mutex held; false when l had ended
// already.
func (l *life) endLocked() bool {
	if l.closed {
		return false
	}
	l.closed = true
	close(l.stop)
	l.cancel()
	return true
}
