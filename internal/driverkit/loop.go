package driverkit

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// loop connects, subscribes to every channel in the set, and watches the
// connection until it fails or Close. A plain subscription then starts
// over after a backoff, and a connection that follows a failed one (or a
// failed attempt) reports a Reset once its channels are confirmed:
// messages published in between are lost, and callers whose Subscribe
// failed meanwhile learn that their channels are subscribed after all.
// Under an owner it retires instead: the owner places the channels again,
// and reports the Reset.
func (s *subscription) loop() {
	defer close(s.done)
	backoff := reconnectBackoff()
	failed := false
	for {
		conn, confirmed, ok := s.connect()
		if !ok {
			return // Close came first; connect's helper closes the connection
		}
		if confirmed {
			if failed {
				s.h.Reset()
			}
			backoff.Reset()
			s.watch(conn)
		}
		failed = true
		s.drop(conn)
		if s.owner != nil {
			s.retire()
			return
		}
		if !backoff.sleep(s.stop) {
			return
		}
	}
}

// retire ends a connection under an owner: no channel is added any more
// (errRetired), and the channels of the set go back to the owner.
func (s *subscription) retire() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.retired = true
	channels := make([]string, 0, len(s.channels))
	for ch := range s.channels {
		channels = append(channels, ch)
	}
	clear(s.channels)
	s.mu.Unlock()
	s.owner.lost(s, channels, "")
}

// watch waits for conn to fail, or Close, meanwhile having the UNSUBSCRIBEs
// that callers could not send sent by a helper goroutine (flush), which it
// waits for unless conn fails or Close comes first.
func (s *subscription) watch(conn PubSubConn) {
	for {
		select {
		case err := <-conn.Lost():
			s.heard(err)
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
			case err := <-conn.Lost(): // its successor subscribes to the set only
				s.heard(err)
				return
			case <-s.stop:
				return
			}
		}
	}
}

// heard takes note of why a connection ended: when the library's client was
// closed, nothing it sends can succeed again, and the Handler hears it once
// (a Reset), so that waiters ask the server again now and each learns it
// from its own attempt (driver.ErrClientClosed), not at its next poll.
func (s *subscription) heard(err error) {
	if errors.Is(err, driver.ErrClientClosed) && s.toldClosed.CompareAndSwap(false, true) {
		s.h.Reset()
	}
}

// connect dials a new connection and subscribes it to the whole set
// (resubscribe), reporting whether the server confirmed every channel; ok
// is false when Close came first.
//
// The library's calls run in a helper goroutine, which connect stops
// waiting for at Close: the dial may take no context (rueidis's Dedicate
// dials and sends its handshake bounded by the dial timeout only), and
// neither may the first command of a connection, which makes it. Abandoned
// at Close, the helper owns the connection: it ends once the library
// returns (its dial timeout, or confirmTimeout, bound that; Close cancels
// the subscribe) and it has closed the connection.
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
		c := s.dial(Hooks{Message: s.h.Message, Subscription: s.replied})
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
	confirmed := s.waiting.Expect(channels)
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(s.ctx, s.confirmTimeout)
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
		s.waiting.Forget(channels, confirmed)
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
		case err, ok := <-conn.Lost():
			if !ok {
				return
			}
			s.heard(err)
		case <-t.C:
			return
		case <-s.stop:
			return
		}
	}
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
		case err := <-lost:
			s.heard(err)
			return errConnLost
		}
	}
	return nil
}

// replied is Hooks.Subscription: a confirmation ends the waits for
// it; under an owner, a channel the server drops while it is still in the
// set (a caller's UNSUBSCRIBE takes it out first) had its slot moved to
// another master, and goes back to the owner.
func (s *subscription) replied(kind, channel string) {
	switch kind {
	case "subscribe", "ssubscribe":
		s.mu.Lock()
		list := s.waiting.Take(channel)
		s.mu.Unlock()
		for _, c := range list {
			close(c)
		}
	case "unsubscribe", "sunsubscribe":
		if s.owner == nil {
			return
		}
		s.mu.Lock()
		_, moved := s.channels[channel]
		delete(s.channels, channel)
		s.mu.Unlock()
		if moved {
			s.owner.lost(s, []string{channel}, s.addr)
		}
	}
}
