package driverkit

import (
	"context"
	"time"
)

// Backoff is a delay that doubles from First up to Most: it spaces a
// subscription's reconnections and a Cluster's rounds of TRYAGAIN. The zero
// value of next starts at First. A Backoff is not safe for concurrent use.
type Backoff struct {
	First, Most time.Duration
	next        time.Duration
}

// reconnectBackoff spaces a subscription's attempts to connect again.
func reconnectBackoff() Backoff {
	return Backoff{First: 10 * time.Millisecond, Most: time.Second}
}

// Next returns the current delay and doubles the next one, up to Most.
func (b *Backoff) Next() time.Duration {
	if b.next == 0 {
		b.next = b.First
	}
	d := b.next
	b.next = min(2*b.next, b.Most)
	return d
}

// Reset starts the delays at First again.
func (b *Backoff) Reset() { b.next = 0 }

// sleep waits for the next delay; false when stop closed first.
func (b *Backoff) sleep(stop <-chan struct{}) bool {
	t := time.NewTimer(b.Next())
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}

// Sleep sleeps for d; false when ctx ended first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
