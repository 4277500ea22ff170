package goredis

import (
	"context"
	"errors"
)

// sendGate orders a caller's SUBSCRIBE and UNSUBSCRIBE calls on one go-redis
// PubSub and keeps the caller's context in force while they wait.
//
// A PubSub call first takes the PubSub's lock, which a connection being
// made holds past any context: its dial, then its handshake, bounded by
// the client's dial, read and write timeouts only (reconnecting after a
// failed read, or in another call). A Lock that starts waiting then must
// not wait that long for its subscription. So the call runs in a goroutine
// of its own and the caller stops waiting for it when its ctx ends, or at
// Close. The goroutine belongs to the connection and ends by itself once
// go-redis returns, with the caller's ctx, which has ended by then if the
// caller left.
//
// The gate is a semaphore, held from the moment a call is about to be sent
// until go-redis returns from it, so calls reach the connection in the
// order they passed the gate, as the subscription's channel set changed;
// unlike the PubSub's lock, waiting for it respects a context, and a caller
// that leaves before passing it sends nothing.
type sendGate chan struct{}

func newSendGate() sendGate { return make(sendGate, 1) }

// do runs call through the gate. It returns call's error, ctx's error
// when ctx ends first, or errConnClosed when stop closes first.
func (g sendGate) do(ctx context.Context, stop <-chan struct{}, call func(context.Context) error) error {
	select {
	case g <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return errConnClosed
	}
	done := make(chan error, 1)
	go func() {
		defer func() { <-g }()
		done <- call(ctx)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return errConnClosed
	}
}

var errConnClosed = errors.New("dlock: pub/sub connection closed")
