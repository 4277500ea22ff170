// Package config holds the settings of a lock: every option's value, the
// defaults (in Default, the one place that lists them), and the values
// derived from several settings that the scripts take. The root package's
// options (dlock.WithTTL, ...) write it; the machinery below reads it.
package config

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
)

// Limits on options and names, documented in the root package.
const (
	MinTTL          = 10 * time.Millisecond
	MaxTTL          = 30 * 24 * time.Hour
	MaxNameLen      = 1024
	MaxOwnerInfoLen = 256
)

// Config is every setting of a lock. The zero value is not usable: start
// from Default.
type Config struct {
	TTL            time.Duration
	TTLSet         bool // WithTTL was given: kinds with another default TTL (Latch) use it
	WaitSet        bool // WithWaitStrategy was given: Redlock rejects it, whatever the strategy
	AutoRenew      bool
	KeyPrefix      string
	Spin           bool          // wait by polling (SpinWait) instead of pub/sub
	SpinMin        time.Duration // SpinWait's delays
	SpinMax        time.Duration
	WaiterLease    time.Duration
	MaxHold        time.Duration
	OwnerInfo      string
	ReleaseTimeout time.Duration
	Logger         *slog.Logger
	Observer       Observer // nil: nothing is measured
	Errs           []error

	// ReplicaAck is how many replicas must acknowledge a grant or renewal
	// (WAIT after the script, on its connection); 0: none.
	ReplicaAck        int
	ReplicaAckTimeout time.Duration
	// ReplyTimeout is how long the Redis client waits for a reply (zero:
	// unknown or unlimited), which a WAIT must end before.
	ReplyTimeout time.Duration

	// Timings is the queued locks' timings argument ("<waiter lease ms>
	// <grant px> <fence retention ms>"), set by Seal: every call sends it.
	Timings string
	// PXMillis is InitialPX in ms, set by Seal: the acquire scripts' TTL
	// argument, sent by pointer so that it is not boxed per call.
	PXMillis int64

	// Redlock only: NewRedlock sets Redlock, and the options below are
	// rejected where it is not set.
	Redlock     bool
	NodeTimeout time.Duration // 0: DefaultNodeTimeout
	DriftFactor float64
	RetryMin    time.Duration
	RetryMax    time.Duration
}

// Default returns the defaults. The reasons behind each are in docs/.
func Default() Config {
	return Config{
		TTL:               30 * time.Second,
		AutoRenew:         true,
		KeyPrefix:         "dlock:",
		WaiterLease:       3 * time.Second,
		OwnerInfo:         defaultOwnerInfo(),
		ReleaseTimeout:    5 * time.Second,
		Logger:            slog.New(discardHandler{}),
		ReplicaAckTimeout: time.Second,
		DriftFactor:       0.01,
		RetryMin:          10 * time.Millisecond,
		RetryMax:          200 * time.Millisecond,
	}
}

func defaultOwnerInfo() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("host=%s pid=%d", host, os.Getpid())
}

// Fail records an invalid option.
func (c *Config) Fail(err error) { c.Errs = append(c.Errs, err) }

// Err returns the first invalid option, if any, or a combination of
// options that cannot be checked one at a time.
func (c *Config) Err() error {
	if len(c.Errs) > 0 {
		return c.Errs[0]
	}
	if c.ReplicaAck > 0 && c.ReplicaAckTimeout >= c.TTL {
		return errs.InvalidArgf("WithReplicaAck: the timeout %v must be shorter than the TTL %v", c.ReplicaAckTimeout, c.TTL)
	}
	if c.ReplicaAck > 0 && c.ReplyTimeout > 0 && c.ReplicaAckTimeout >= c.ReplyTimeout {
		return errs.InvalidArgf("WithReplicaAck: the timeout %v must be shorter than the Redis client's read timeout %v, "+
			"or a WAIT that runs out is read as a broken connection: lower it, or raise the client's ReadTimeout",
			c.ReplicaAckTimeout, c.ReplyTimeout)
	}
	return nil
}

// Seal finishes a configuration once its options are applied: it builds
// the values derived from several settings.
func (c *Config) Seal() {
	c.Timings = fmt.Sprintf("%d %d %d", c.WaiterLease.Milliseconds(),
		c.ClaimWindow().Milliseconds(), FenceRetention(c.TTL).Milliseconds())
	c.PXMillis = c.InitialPX().Milliseconds()
}

// InitialPX is the expiry a fresh grant gets: the TTL, or the hold cap when
// that is shorter.
func (c *Config) InitialPX() time.Duration {
	if c.MaxHold > 0 && c.MaxHold < c.TTL {
		return c.MaxHold
	}
	return c.TTL
}

// ClaimWindow is how long a lock handed to a waiter stays its without being
// claimed: the waiter's TTL (capped by the hold limit), at most its waiter
// lease, so a lock handed to a waiter that just died returns to the queue
// within the lease.
func (c *Config) ClaimWindow() time.Duration {
	w := min(c.InitialPX(), c.WaiterLease)
	if c.ReplicaAck > 0 && w > c.InitialPX()-time.Millisecond {
		// Shorter than a fresh grant by at least a millisecond, so a grant
		// this owner found in place (a hand-off, written by the releaser's
		// connection: it must be claimed with WAIT) is never mistaken for
		// one its own call just wrote (covered by the call's own WAIT).
		w = c.InitialPX() - time.Millisecond
	}
	return w
}

// Refresh is how often a waiter renews its place in a lock's queue (its
// lease there): a third of the claim window.
func (c *Config) Refresh() time.Duration { return c.ClaimWindow() / 3 }

// FenceRetention is how long a lock's fencing counter outlives its last
// grant. Tokens also never fall below the server clock in µs, so they keep
// increasing after the counter expires; the retention only guards against
// the server clock stepping back by less than it.
func FenceRetention(ttl time.Duration) time.Duration {
	return max(2*ttl, time.Hour)
}

// CheckTTL validates a TTL.
func CheckTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return errs.InvalidArgf("TTL %v is outside [%v, %v]", ttl, MinTTL, MaxTTL)
	}
	return nil
}

// Detach returns a context for clean-up that outlives ctx's cancellation
// but keeps its values, bounded by timeout. A context that can never be
// cancelled and has no deadline (context.Background) is used as it is: the
// client's own read and write timeouts bound the call, and Unlock then
// costs no timer.
func Detach(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), timeout)
}

// discardHandler is slog's handler that drops everything (slog.DiscardHandler
// needs Go 1.24).
type discardHandler struct{}

func (discardHandler) Enabled(context.Context, slog.Level) bool  { return false }
func (discardHandler) Handle(context.Context, slog.Record) error { return nil }
func (d discardHandler) WithAttrs([]slog.Attr) slog.Handler      { return d }
func (d discardHandler) WithGroup(string) slog.Handler           { return d }
