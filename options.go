package dlock

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
)

// Option configures a Client (as its default for every lock) or one lock or
// Do call (overriding the Client's default). Every option can be used at both
// levels. Invalid values are reported as ErrInvalidArgument: by New for
// client options, by the first call that would reach Redis for lock options.
type Option func(*config)

// Limits enforced on options.
const (
	// MinTTL is the shortest TTL accepted: Redis expires keys with
	// millisecond resolution.
	MinTTL = time.Millisecond
	// MaxTTL is the longest TTL accepted. A lock that must last longer
	// should keep a shorter TTL and be renewed.
	MaxTTL = 30 * 24 * time.Hour
	// MaxNameLen is the longest lock name accepted, in bytes.
	MaxNameLen = 1024
	// MaxOwnerInfoLen is the longest owner description accepted, in bytes.
	MaxOwnerInfoLen = 256
)

// config holds every setting of a lock. defaultConfig is the one place that
// lists the defaults.
type config struct {
	ttl            time.Duration
	ttlSet         bool // WithTTL was given: primitives with another default TTL (Latch) use it
	autoRenew      bool
	keyPrefix      string
	wait           WaitStrategy
	waiterLease    time.Duration
	maxHold        time.Duration
	ownerInfo      string
	releaseTimeout time.Duration
	logger         *slog.Logger
	errs           []error
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

// err returns the first invalid option, if any.
func (c *config) err() error {
	if len(c.errs) > 0 {
		return c.errs[0]
	}
	return nil
}

// WithTTL sets how long a lock lives in Redis without renewal, between MinTTL
// and MaxTTL. With auto-renew the watchdog renews it every TTL/3, so the TTL
// is also the longest a crashed holder keeps others waiting. Default: 30s.
func WithTTL(ttl time.Duration) Option {
	return func(c *config) {
		if err := checkTTL(ttl); err != nil {
			c.fail(fmt.Errorf("WithTTL: %w", err))
			return
		}
		c.ttl = ttl
		c.ttlSet = true
	}
}

func checkTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return invalidArgf("TTL %v is outside [%v, %v]", ttl, MinTTL, MaxTTL)
	}
	return nil
}

// WithAutoRenew turns the watchdog on or off. On, a held lock is renewed
// every TTL/3 until Unlock, and Lease.Done closes if renewal fails. Off, the
// lock expires one TTL after it was granted unless Lease.Extend is called.
// Default: true.
func WithAutoRenew(on bool) Option {
	return func(c *config) { c.autoRenew = on }
}

// WithKeyPrefix sets the prefix of every key and channel dlock uses; the key
// of lock N is prefix + "{" + N + "}". The prefix must not contain '{' or
// '}', which would break the Cluster hash tag. Default: "dlock:".
func WithKeyPrefix(prefix string) Option {
	return func(c *config) {
		if strings.ContainsAny(prefix, "{}") {
			c.fail(invalidArgf("WithKeyPrefix(%q): the prefix must not contain '{' or '}'", prefix))
			return
		}
		c.keyPrefix = prefix
	}
}

// WithWaitStrategy sets how Lock waits for a lock that is taken: NotifyWait
// (pub/sub wake-ups) or SpinWait (polling, for servers or proxies without
// pub/sub). Default: NotifyWait().
func WithWaitStrategy(s WaitStrategy) Option {
	return func(c *config) {
		if s.spin && (s.minDelay < time.Millisecond || s.maxDelay < s.minDelay || s.maxDelay > time.Minute) {
			c.fail(invalidArgf("SpinWait(%v, %v): delays must satisfy 1ms <= min <= max <= 1m", s.minDelay, s.maxDelay))
			return
		}
		c.wait = s
	}
}

// WithWaiterLease sets how long a waiter's place in a lock's queue survives
// without being refreshed, between 100ms and 1m. A waiting Lock refreshes
// it every third of this; a waiter that crashes leaves the queue, and a lock
// handed to it returns to the queue, within this time. Default: 3s.
func WithWaiterLease(d time.Duration) Option {
	return func(c *config) {
		if d < 100*time.Millisecond || d > time.Minute {
			c.fail(invalidArgf("WithWaiterLease(%v): must be between 100ms and 1m", d))
			return
		}
		c.waiterLease = d
	}
}

// WithMaxHold caps how long a lock can be held in total: the watchdog stops
// renewing so that the lock expires at most this long after it was granted,
// and the lease then reports ErrLockLost. Zero means no cap. Default: 0.
func WithMaxHold(d time.Duration) Option {
	return func(c *config) {
		if d != 0 && (d < MinTTL || d > 100*MaxTTL) {
			c.fail(invalidArgf("WithMaxHold(%v): must be 0 (no cap) or between %v and %v", d, MinTTL, 100*MaxTTL))
			return
		}
		c.maxHold = d
	}
}

// WithOwnerInfo sets the description stored with every lock this client
// holds, shown by inspection and the dlock CLI, e.g. "worker-7 build=1f3c".
// At most MaxOwnerInfoLen bytes; empty stores none. Default: "host=<hostname>
// pid=<pid>".
func WithOwnerInfo(info string) Option {
	return func(c *config) {
		if len(info) > MaxOwnerInfoLen {
			c.fail(invalidArgf("WithOwnerInfo: %d bytes is more than %d", len(info), MaxOwnerInfoLen))
			return
		}
		c.ownerInfo = info
	}
}

// WithReleaseTimeout bounds Unlock and the clean-up after a cancelled wait,
// which run detached from the caller's context so that a cancelled request
// still releases its lock. Default: 5s.
func WithReleaseTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail(invalidArgf("WithReleaseTimeout(%v): must be positive", d))
			return
		}
		c.releaseTimeout = d
	}
}

// WithLogger sets where dlock logs renewal failures, lost locks and
// reconnections. Default: nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.fail(invalidArgf("WithLogger(nil)"))
			return
		}
		c.logger = l
	}
}

// WaitStrategy is how a waiting Lock learns that it may proceed. Build one
// with NotifyWait or SpinWait.
type WaitStrategy struct {
	spin               bool
	minDelay, maxDelay time.Duration
}

// NotifyWait waits on the Client's shared pub/sub subscription: a release
// hands the lock to the first waiter and tells it at once. Waiters also poll
// at a slow pace, so a lost message costs latency, never a hang.
func NotifyWait() WaitStrategy { return WaitStrategy{} }

// SpinWait waits by polling, for deployments without pub/sub: the delay
// between polls grows exponentially from minDelay to maxDelay, with jitter.
// Waiters still keep their place in the queue.
func SpinWait(minDelay, maxDelay time.Duration) WaitStrategy {
	return WaitStrategy{spin: true, minDelay: minDelay, maxDelay: maxDelay}
}

// String describes the strategy.
func (s WaitStrategy) String() string {
	if s.spin {
		return fmt.Sprintf("SpinWait(%v, %v)", s.minDelay, s.maxDelay)
	}
	return "NotifyWait()"
}

// detach returns a context for clean-up that outlives ctx's cancellation but
// keeps its values, bounded by the release timeout.
func detach(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), timeout)
}

// discardHandler is slog's handler that drops everything (slog.DiscardHandler
// needs Go 1.24).
type discardHandler struct{}

func (discardHandler) Enabled(context.Context, slog.Level) bool  { return false }
func (discardHandler) Handle(context.Context, slog.Record) error { return nil }
func (d discardHandler) WithAttrs([]slog.Attr) slog.Handler      { return d }
func (d discardHandler) WithGroup(string) slog.Handler           { return d }
