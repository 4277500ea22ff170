package wait

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/notify"
)

// Subscribing is a wait's subscription to its channel while the server has
// not confirmed it: made in a goroutine of the wait's, so that the wait
// goes on meanwhile. Its zero value is no subscription being made.
type Subscribing struct {
	Done   chan error // the outcome, once; nil when none is being made
	cancel context.CancelFunc
}

// Start subscribes n to channel, giving up after limit or when ctx ends.
func (s *Subscribing) Start(ctx context.Context, limit time.Duration, n *notify.Notifier, channel string) {
	sctx, cancel := context.WithTimeout(ctx, limit)
	done := make(chan error, 1)
	s.Done, s.cancel = done, cancel
	go func() { done <- n.Subscribe(sctx, channel) }()
}

// End forgets the subscription once its outcome was received.
func (s *Subscribing) End() {
	s.cancel()
	s.Done, s.cancel = nil, nil
}

// Stop ends a subscription still being made, and waits for its goroutine.
func (s *Subscribing) Stop() {
	if s.Done != nil {
		s.cancel()
		<-s.Done
		s.End()
	}
}

// MinSubscribeWait is the least time a waiter gives the server to confirm
// its subscription before it polls instead: the poll delay, or
// this when that is shorter.
const MinSubscribeWait = time.Second
