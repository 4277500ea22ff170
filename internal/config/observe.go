package config

import (
	"context"
	"sync/atomic"
	"time"
)

// Observer is what the machinery reports about leases. The root package
// adapts dlock.Observer to it, and reports the acquires itself.
type Observer interface {
	Renewed(l LeaseInfo, err error)
	Lost(l LeaseInfo, err error)
	Released(ctx context.Context, l LeaseInfo, err error)
}

// LeaseInfo describes a lease in Observer events (dlock.LeaseInfo).
type LeaseInfo struct {
	Name  string
	Kind  string
	Token int64
	Held  time.Duration
}

// AcquireStats counts the attempts of one observed acquire; it travels in
// the acquire's context (only when an Observer is set).
type AcquireStats struct{ Attempts atomic.Int64 }

type statsKey struct{}

// WithStats returns ctx carrying s.
func WithStats(ctx context.Context, s *AcquireStats) context.Context {
	return context.WithValue(ctx, statsKey{}, s)
}

// CountAttempt notes one attempt of the acquire running under ctx.
func (c *Config) CountAttempt(ctx context.Context) {
	if c.Observer == nil {
		return
	}
	if s, ok := ctx.Value(statsKey{}).(*AcquireStats); ok {
		s.Attempts.Add(1)
	}
}
