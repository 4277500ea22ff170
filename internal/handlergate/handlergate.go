// Package handlergate guards a pub/sub subscription's driver.Handler: its
// calls come one at a time, and none comes after the subscription's Close
// has begun, whatever goroutines of the driver are still reading. The
// subscriptions of internal/driverkit, every driver's, plain and sharded,
// route their Handler calls through one.
package handlergate

import (
	"sync"

	"github.com/dlock-go/dlock/driver"
)

// Handler is a driver.Handler that passes calls on to another until Close.
type Handler struct {
	h      driver.Handler
	mu     sync.Mutex // one call at a time, and Close waits for the call in progress
	closed bool       // guarded by mu
}

var _ driver.Handler = (*Handler)(nil)

// New returns a Handler that passes calls on to h.
func New(h driver.Handler) *Handler { return &Handler{h: h} }

// Message implements driver.Handler: h.Message, unless Close was called.
func (g *Handler) Message(channel, payload string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.h.Message(channel, payload)
	}
}

// Reset implements driver.Handler: h.Reset, unless Close was called.
func (g *Handler) Reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.h.Reset()
	}
}

// Close stops the calls: once it returns, the call in progress (if any)
// has ended and no other is made.
func (g *Handler) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}
