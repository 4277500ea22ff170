package driverkit

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/confirm"
	"github.com/dlock-go/dlock/internal/handlergate"
)

const (
	// confirmTimeout bounds the wait for the server to confirm the channels
	// a new connection subscribes to; past it the connection is replaced.
	// Close ends the wait at once.
	confirmTimeout = 5 * time.Second
	// closeTimeout bounds the wait, after closing a failed connection, for
	// the library to stop calling the hooks. Close ends the wait at once.
	closeTimeout = 5 * time.Second
)

var (
	errClosed   = errors.New("dlock: subscription closed")
	errConnLost = errors.New("dlock: pub/sub connection lost before the server confirmed the subscription")
)

// Hooks receive what a PubSubConn hears. The library calls them one at a
// time from a goroutine of its own; they never block.
type Hooks struct {
	// Message is called for each message on a subscribed channel.
	Message func(channel, payload string)
	// Subscribed is called when the server confirms a SUBSCRIBE of channel.
	Subscribed func(channel string)
}

// PubSubConn is one dedicated pub/sub connection of a client library.
type PubSubConn interface {
	// Subscribe sends SUBSCRIBE for channels. The server's confirmations
	// arrive through Hooks.Subscribed. It should return when ctx ends; the
	// subscription does not rely on it to close promptly, since a library
	// may have to connect first and bound that by its dial timeout only.
	Subscribe(ctx context.Context, channels ...string) error
	// Unsubscribe sends UNSUBSCRIBE for channels.
	Unsubscribe(ctx context.Context, channels ...string) error
	// Lost returns a channel that receives at most one error, why the
	// connection ended, and is closed once the hooks will not be called
	// any more.
	Lost() <-chan error
	// Close closes the connection; Lost is closed soon after. It may wait
	// a little for the server (rueidis waits up to 1 s for the reply to a
	// last PING), which is why the subscription never waits for it in
	// Close.
	Close()
}

// subscription multiplexes every channel of one dlock Client over one
// dedicated connection, which one goroutine, loop, opens, watches and
// replaces when it fails. The library's hooks deliver messages; calls to the
// Handler are serialized by h.
//
// Close must return promptly even when the server stopped answering, but
// the library has calls that take no context or ignore its cancellation:
// rueidis's Dedicate dials and sends its handshake without one, bounded by
// the dial timeout only, a Cluster's dedicated client connects on its first
// command the same way, and closing a connection waits up to 1 s for the
// server. So the loop makes those calls in a helper goroutine (see connect
// and drop) and itself only ever waits in selects that Close ends. The
// helpers that outlive Close belong to the subscription and end by
// themselves once the library returns: the one that holds the last
// connection, after closing it, and one sending UNSUBSCRIBE (flush).
type subscription struct {
	dial func(Hooks) PubSubConn
	h    *handlergate.Handler // one call at a time; none after Close

	// ctx is cancelled by Close: it ends the subscribe commands in flight,
	// the callers' and the loop's.
	ctx    context.Context
	cancel context.CancelFunc

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
	closed  bool

	stop chan struct{}
	done chan struct{}
}

func newSubscription(dial func(Hooks) PubSubConn, h driver.Handler) *subscription {
	ctx, cancel := context.WithCancel(context.Background())
	return &subscription{
		dial:     dial,
		h:        handlergate.New(h),
		ctx:      ctx,
		cancel:   cancel,
		send:     make(chan struct{}, 1),
		channels: make(map[string]struct{}),
		unsent:   make(map[string]struct{}),
		kick:     make(chan struct{}, 1),
		waiting:  confirm.Waiters{},
		failed:   make(chan struct{}),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
}

// Subscribe implements driver.Subscription. It returns an error when the
// server refuses, or when the connection fails before confirming: the caller
// then knows that messages may not arrive, and may try again later. Close
// ends it with errClosed, even while the library is still sending.
func (s *subscription) Subscribe(ctx context.Context, channels ...string) error {
	if len(channels) == 0 {
		return nil
	}
	if err := s.lockSend(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.unlockSend()
		return errClosed
	}
	var added []string
	for _, ch := range channels {
		if _, ok := s.channels[ch]; !ok {
			s.channels[ch] = struct{}{}
			added = append(added, ch)
		}
	}
	confirmed := s.expectLocked(channels)
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
		s.forgetLocked(channels, confirmed)
		for _, ch := range added {
			delete(s.channels, ch)
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
		// Left in the set, the channel stayed subscribed on this
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
	ctx, cancel := context.WithTimeout(s.ctx, confirmTimeout)
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
// called any more. It cancels the subscribe commands in flight and returns
// once the loop has stopped, which is at once: the loop only ever waits in
// selects that Close ends. The connection is closed by the loop's helper
// goroutine, which may still be running: it waits for the library (a dial,
// a subscribe on a Cluster connection not made yet, closing the
// connection), and ends by itself when the library returns (see connect
// and drop).
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

// loop connects, subscribes to every channel in the set, and watches the
// connection until it fails or Close; then it starts over after a backoff.
// A connection that replaces one that worked reports a Reset once its
// channels are confirmed: messages published in between are lost.
func (s *subscription) loop() {
	defer close(s.done)
	backoff := newBackoff()
	worked := false
	for {
		conn, confirmed, ok := s.connect()
		if !ok {
			return // Close came first; connect's helper closes the connection
		}
		if confirmed {
			if worked {
				s.h.Reset()
			}
			worked = true
			backoff.reset()
			s.watch(conn)
		}
		s.drop(conn)
		if !backoff.sleep(s.stop) {
			return
		}
	}
}

// watch waits for conn to fail, or Close, meanwhile having the UNSUBSCRIBEs
// that callers could not send sent by a helper goroutine (flush), which it
// waits for unless conn fails or Close comes first.
func (s *subscription) watch(conn PubSubConn) {
	for {
		select {
		case <-conn.Lost():
			return
		case <-s.stop:
			return
		case <-s.kick:
			done := make(chan struct{})
			go func() {
				defer close(done)
				s.flush(conn)
			}()
			select {
			case <-done:
			case <-conn.Lost(): // its successor subscribes to the set only
				return
			case <-s.stop:
				return
			}
		}
	}
}

// connect dials a new connection and subscribes it to the whole set
// (resubscribe), reporting whether the server confirmed every channel; ok
// is false when Close came first.
//
// The library's calls run in a helper goroutine, which connect stops
// waiting for at Close: the dial takes no context (rueidis's Dedicate dials
// and sends its handshake bounded by the dial timeout only), and neither
// does the first command of a Cluster's dedicated connection, which makes
// the connection. Abandoned at Close, the helper owns the connection: it
// ends once the library returns (its dial timeout, or confirmTimeout, bound
// that; Close cancels the subscribe) and it has closed the connection.
func (s *subscription) connect() (conn PubSubConn, confirmed, ok bool) {
	type attempt struct {
		conn      PubSubConn
		confirmed bool
	}
	// Unbuffered: the helper hands the connection over only to a loop that
	// takes it, and otherwise sees stop and closes it itself.
	got := make(chan attempt)
	go func() {
		select {
		case <-s.stop:
			return // no dial after Close: the loop returns too
		default:
		}
		c := s.dial(Hooks{Message: s.h.Message, Subscribed: s.confirm})
		a := attempt{conn: c, confirmed: s.resubscribe(c)}
		select {
		case got <- a:
		case <-s.stop:
			s.mu.Lock()
			if s.conn == c {
				s.conn = nil
			}
			s.mu.Unlock()
			c.Close() // nobody waits for the hooks to stop: no successor comes
		}
	}()
	select {
	case a := <-got:
		return a.conn, a.confirmed, true
	case <-s.stop:
		return nil, false, false
	}
}

// resubscribe makes conn the connection in use and subscribes it to the
// whole set, reporting whether the server confirmed every channel. Close
// ends it, cancelling the SUBSCRIBE in flight.
func (s *subscription) resubscribe(conn PubSubConn) bool {
	select {
	case <-s.stop: // checked first: lockSend picks at random when both are ready
		return false
	default:
	}
	select {
	case s.send <- struct{}{}:
	case <-s.stop:
		return false
	}
	s.mu.Lock()
	s.conn = conn
	clear(s.unsent) // conn subscribes to the set only
	channels := make([]string, 0, len(s.channels))
	for ch := range s.channels {
		channels = append(channels, ch)
	}
	confirmed := s.expectLocked(channels)
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(s.ctx, confirmTimeout)
	defer cancel()
	var err error
	if len(channels) > 0 {
		err = conn.Subscribe(ctx, channels...)
	}
	s.unlockSend()
	if err == nil {
		err = s.await(ctx, confirmed, nil, conn.Lost())
	}
	if err != nil {
		s.mu.Lock()
		s.forgetLocked(channels, confirmed)
		s.mu.Unlock()
		return false
	}
	return true
}

// drop retires a failed or closed connection: callers waiting for a
// confirmation on it give up, and it is closed. It returns once the library
// stopped calling the hooks, so a late confirmation from conn cannot be
// mistaken for one from its successor; or at once at Close, when no
// successor will come.
//
// The library closes conn in a helper goroutine, because closing may wait
// for the server (rueidis waits up to 1 s for the reply to a last PING)
// and Close must not. Abandoned at Close, the helper ends when the
// library's Close returns.
func (s *subscription) drop(conn PubSubConn) {
	s.mu.Lock()
	if s.conn == conn {
		s.conn = nil
	}
	close(s.failed)
	s.failed = make(chan struct{})
	s.mu.Unlock()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		conn.Close()
	}()
	select {
	case <-closed:
	case <-s.stop:
		return
	}
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	for {
		select {
		case _, ok := <-conn.Lost():
			if !ok {
				return
			}
		case <-t.C:
			return
		case <-s.stop:
			return
		}
	}
}

// expectLocked registers a confirmation to wait for on each channel.
func (s *subscription) expectLocked(channels []string) []chan struct{} {
	return s.waiting.Expect(channels)
}

// await waits for every confirmation, ctx, Close, failed closing or lost
// delivering (nil channels never do).
func (s *subscription) await(ctx context.Context, confirmed []chan struct{}, failed <-chan struct{}, lost <-chan error) error {
	for _, c := range confirmed {
		select {
		case <-c:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.stop:
			return errClosed
		case <-failed:
			return errConnLost
		case <-lost:
			return errConnLost
		}
	}
	return nil
}

// forgetLocked drops the confirmations of a subscribe that failed.
func (s *subscription) forgetLocked(channels []string, confirmed []chan struct{}) {
	s.waiting.Forget(channels, confirmed)
}

// confirm is Hooks.Subscribed.
func (s *subscription) confirm(channel string) {
	s.mu.Lock()
	list := s.waiting.Take(channel)
	s.mu.Unlock()
	for _, c := range list {
		close(c)
	}
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
