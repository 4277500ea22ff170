package dlock

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/wait"
)

// config holds every setting of a lock. defaultConfig is the one place that
// lists the defaults.
type config struct {
	ttl            time.Duration
	ttlSet         bool // WithTTL was given: primitives with another default TTL (Latch) use it
	waitSet        bool // WithWaitStrategy was given: Redlock rejects it, whatever the strategy
	autoRenew      bool
	keyPrefix      string
	wait           WaitStrategy
	waiterLease    time.Duration
	maxHold        time.Duration
	waitTimeout    time.Duration // 0: a wait lasts as long as its ctx allows
	minHold        time.Duration // 0: Unlock releases at once
	ownerInfo      string
	releaseTimeout time.Duration
	logger         *slog.Logger
	observer       Observer // nil: nothing is measured
	errs           []error

	// replicaAck is how many replicas must acknowledge a grant or renewal
	// (WAIT after the script, on its connection); 0: none. See
	// WithReplicaAck and replicaack.go.
	replicaAck        int
	replicaAckTimeout time.Duration
	// replyTimeout is how long the Redis client waits for a reply (zero:
	// unknown or unlimited), which a WAIT must end before.
	replyTimeout time.Duration

	// timings is the Mutex scripts' timings argument (mutex_acquire.lua),
	// set by seal once the options are applied: every call sends it.
	timings string
	// pxMillis is initialPX in ms, set by seal: the acquire script's TTL
	// argument, sent as a pointer so that it is not boxed per call.
	pxMillis int64

	// Redlock only: NewRedlock sets redlock, and the options below are
	// rejected (ErrInvalidArgument) where it is not set.
	redlock     bool
	nodeTimeout time.Duration // 0: defaultNodeTimeout
	driftFactor float64
	retryMin    time.Duration
	retryMax    time.Duration
}

// claimWindow is how long a lock handed to a waiter stays its without being
// claimed: the waiter's TTL (capped by the hold limit), at most its waiter
// lease, so a lock handed to a waiter that just died returns to the queue
// within the lease.
func (c *config) claimWindow() time.Duration {
	w := c.initialPX()
	if c.waiterLease < w {
		w = c.waiterLease
	}
	if c.replicaAck > 0 && w > c.initialPX()-time.Millisecond {
		// Shorter than a fresh grant by at least a millisecond, so a
		// grant this owner found in place (a hand-off, written by the
		// releaser's connection: it must be claimed with WAIT) is never
		// mistaken for one its own call just wrote (covered by the call's
		// own WAIT). See grantAcked.
		w = c.initialPX() - time.Millisecond
	}
	return w
}

// refresh is how often a waiter renews its place in a lock's queue (its
// lease there): a third of the claim window, never more than a third of
// the waiter lease.
func (c *config) refresh() time.Duration { return c.claimWindow() / 3 }

// seal finishes a configuration once its options are applied: it builds
// the values derived from several settings. The timings argument is the
// Client's (base, sealed; nil for the Client's own) when the settings it
// says are the same, as they are for most options given per call (a TTL
// under half an hour leaves all three alone): a lock made per call then
// formats nothing.
func (c *config) seal(base *config) {
	k := c.timingsKey()
	if base != nil && base.timingsKey() == k {
		c.timings = base.timings
	} else {
		c.timings = k.String()
	}
	c.pxMillis = c.initialPX().Milliseconds()
}

// initialPX is the expiry a fresh grant gets: the TTL, or the hold cap when
// that is shorter.
func (c *config) initialPX() time.Duration {
	if c.maxHold > 0 && c.maxHold < c.ttl {
		return c.maxHold
	}
	return c.ttl
}

// defaultConfig returns the defaults. The reasons behind each are in
// docs/design.md.
func defaultConfig() config {
	return config{
		ttl:            30 * time.Second,
		autoRenew:      true,
		keyPrefix:      "dlock:",
		wait:           NotifyWait(),
		waiterLease:    3 * time.Second,
		maxHold:        0,
		ownerInfo:      defaultOwnerInfo(),
		releaseTimeout: 5 * time.Second,
		logger:         slog.New(discardHandler{}),

		replicaAck:        0, // off
		replicaAckTimeout: time.Second,

		// Redlock only.
		nodeTimeout: 0, // derived from the TTL: see defaultNodeTimeout
		driftFactor: 0.01,
		retryMin:    10 * time.Millisecond,
		retryMax:    200 * time.Millisecond,
	}
}

func defaultOwnerInfo() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("host=%s pid=%d", host, os.Getpid())
}

func (c *config) fail(err error) { c.errs = append(c.errs, err) }

// err returns the first invalid option, if any, or a combination of
// options that cannot be checked one at a time.
func (c *config) err() error {
	if len(c.errs) > 0 {
		return c.errs[0]
	}
	if c.replicaAck > 0 && c.replicaAckTimeout >= c.ttl {
		return errs.InvalidArgf("WithReplicaAck: the timeout %v must be shorter than the TTL %v", c.replicaAckTimeout, c.ttl)
	}
	if c.replicaAck > 0 && c.replyTimeout > 0 && c.replicaAckTimeout >= c.replyTimeout {
		return errs.InvalidArgf("WithReplicaAck: the timeout %v must be shorter than the Redis client's read timeout %v, "+
			"or a WAIT that runs out is read as a broken connection: lower it, or raise the client's ReadTimeout",
			c.replicaAckTimeout, c.replyTimeout)
	}
	return nil
}

func checkTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return errs.InvalidArgf("TTL %v is outside [%v, %v]", ttl, MinTTL, MaxTTL)
	}
	return nil
}

// detach returns a context for clean-up that outlives ctx's cancellation but
// keeps its values, bounded by the release timeout. A context that can never
// be cancelled and has no deadline (context.Background) is used as it is:
// the client's own read and write timeouts bound the call, and Unlock then
// costs no timer.
func detach(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), timeout)
}

// discardHandler is slog's handler that drops everything (slog.DiscardHandler
// needs Go 1.24).
type discardHandler struct{}

func (discardHandler) Enabled(context.Context, slog.Level) bool { return false }

func (discardHandler) Handle(context.Context, slog.Record) error { return nil }

func (d discardHandler) WithAttrs([]slog.Attr) slog.Handler { return d }

func (d discardHandler) WithGroup(string) slog.Handler { return d }

// defaultNodeTimeout is Redlock's per-node timeout when WithNodeTimeout is
// not given: TTL/100 within [10ms, 500ms], and at most half the validity
// left after the drift allowance, so that a node answering at its timeout
// still leaves most of the lease. See docs/design.md.
func defaultNodeTimeout(ttl, drift time.Duration) time.Duration {
	d := min(max(ttl/100, 10*time.Millisecond), 500*time.Millisecond)
	if half := (ttl - drift) / 2; d > half {
		d = half
	}
	return d
}

func redlockOnly(option string) error {
	return errs.InvalidArgf("%s applies to Redlock only (NewRedlock, Redlock.Mutex, Redlock.Do)", option)
}

// fenceRetention is how long a lock's fencing counter outlives its last
// grant. Tokens also never fall below the server clock in µs, so they keep
// increasing after the counter expires; the retention only guards against
// the server clock stepping back by less than it.
func fenceRetention(ttl time.Duration) time.Duration {
	if r := 2 * ttl; r > time.Hour {
		return r
	}
	return time.Hour
}

// waitSettings are a wait's options under c.
func (c *config) waitSettings() *wait.Settings {
	s := &wait.Settings{Spin: c.wait.spin, SpinMin: c.wait.minDelay, SpinMax: c.wait.maxDelay,
		Refresh: c.refresh(), WaiterLease: c.waiterLease, Logger: c.logger}
	if c.observer != nil {
		s.CountAttempt = func(ctx context.Context) { countAttempt(ctx, c) }
	}
	return s
}
