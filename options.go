package dlock

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
)

// Option configures a Client (as its default for every lock) or one lock or
// Do call (overriding the Client's default). Every option can be used at both
// levels, except where it does not apply: WithNodeTimeout, WithDriftFactor and
// WithRetryDelay are Redlock's only, and New and the Client's locks reject
// them; NewRedlock and Redlock.Mutex reject WithReplicaAck, WithWaiterLease
// and WithWaitStrategy. Invalid values are reported as ErrInvalidArgument: by
// New for client options, by the first call that would reach Redis for lock
// options.
type Option func(*config)

// Limits enforced on options and lock names.
const (
	// MinTTL is the shortest TTL accepted. A lease's validity is its TTL
	// minus a drift allowance of TTL/100 + 2ms (clock rates and Redis's
	// millisecond expiry), so a TTL near 2ms could never be held; 10ms leaves
	// room for at least a few round trips.
	MinTTL = 10 * time.Millisecond
	// MaxTTL is the longest TTL accepted. A lock that must last longer
	// should keep a shorter TTL and be renewed.
	MaxTTL = 30 * 24 * time.Hour
	// MaxNameLen is the longest lock name accepted, in bytes.
	MaxNameLen = 1024
	// MaxOwnerInfoLen is the longest owner description accepted, in bytes.
	MaxOwnerInfoLen = 256
)

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
			c.fail(errs.InvalidArgf("WithKeyPrefix(%q): the prefix must not contain '{' or '}'", prefix))
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
			c.fail(errs.InvalidArgf("SpinWait(%v, %v): delays must satisfy 1ms <= min <= max <= 1m", s.minDelay, s.maxDelay))
			return
		}
		c.wait = s
		c.waitSet = true
	}
}

// WithWaiterLease sets how long a waiter's place in a lock's queue survives
// without being refreshed, between 100ms and 1m. A waiting Lock refreshes
// it every third of this; a waiter that crashes leaves the queue, and a lock
// handed to it returns to the queue, within this time. Default: 3s.
func WithWaiterLease(d time.Duration) Option {
	return func(c *config) {
		if d < 100*time.Millisecond || d > time.Minute {
			c.fail(errs.InvalidArgf("WithWaiterLease(%v): must be between 100ms and 1m", d))
			return
		}
		c.waiterLease = d
	}
}

// WithMaxHold caps how long a lock can be held in total: the watchdog stops
// renewing so that the lock expires at most this long after it was granted,
// and the lease then reports ErrLockLost. d must be 0 (no cap) or between
// MinTTL and 100 × MaxTTL. Default: 0.
func WithMaxHold(d time.Duration) Option {
	return func(c *config) {
		if d != 0 && (d < MinTTL || d > 100*MaxTTL) {
			c.fail(errs.InvalidArgf("WithMaxHold(%v): must be 0 (no cap) or between %v and %v", d, MinTTL, 100*MaxTTL))
			return
		}
		c.maxHold = d
	}
}

// WithMinHold keeps a lock held for at least d after its grant, even if
// Unlock comes sooner: such an Unlock returns at once and leaves the key
// to expire d after the grant, unrenewed, so that nobody else gets the
// lock before. It makes "exactly once" hold against schedulers that fire
// a few moments apart on each host (see docs/guide.md, "Once across
// hosts"). An Unlock after d releases as usual. d must be 0 (the default:
// none) or between MinTTL and MaxTTL.
func WithMinHold(d time.Duration) Option {
	return func(c *config) {
		if d != 0 && (d < MinTTL || d > MaxTTL) {
			c.fail(errs.InvalidArgf("WithMinHold(%v): must be 0 (none) or between %v and %v", d, MinTTL, MaxTTL))
			return
		}
		c.minHold = d
	}
}

// WithWaitTimeout bounds every wait for the lock to d, apart from the
// context: Lock, RLock, Acquire, Campaign, and Do's wait, whose context
// then bounds only the work ("wait at most 5 s for the lock, then run as
// long as the job needs"). A wait that times out returns an error matching
// ErrNotObtained and context.DeadlineExceeded. TryLock does not wait, so
// it does not apply there. d must not be negative; 0 (the default) waits
// as long as the context allows.
func WithWaitTimeout(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.fail(errs.InvalidArgf("WithWaitTimeout(%v): must not be negative", d))
			return
		}
		c.waitTimeout = d
	}
}

// WithOwnerInfo sets the description stored with every lock this client
// holds, shown by inspection and the dlock CLI, e.g. "worker-7 build=1f3c".
// At most MaxOwnerInfoLen bytes; empty stores none. Default: "host=<hostname>
// pid=<pid>".
func WithOwnerInfo(info string) Option {
	return func(c *config) {
		if len(info) > MaxOwnerInfoLen {
			c.fail(errs.InvalidArgf("WithOwnerInfo: %d bytes is more than %d", len(info), MaxOwnerInfoLen))
			return
		}
		c.ownerInfo = info
	}
}

// WithReleaseTimeout bounds Unlock and the clean-up after a cancelled wait,
// which run detached from the caller's context so that a cancelled request
// still releases its lock. An Unlock given a context that can never be
// cancelled (context.Background()) is bounded by the Redis client's own
// timeouts instead, and costs no timer. d must be positive. Default: 5s.
func WithReleaseTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail(errs.InvalidArgf("WithReleaseTimeout(%v): must be positive", d))
			return
		}
		c.releaseTimeout = d
	}
}

// WithLogger sets where dlock logs what it handles by itself, which no call
// returns: at Warn, lost locks and failed renewals (attributes lock, kind,
// token, and reason or error), clean-ups and releases that failed (the lock
// then expires by its TTL) and waits that fall back to polling; at Info,
// reconnections of the pub/sub subscription; at Debug, failed attempts that
// Lock retries. A record about one lock names it (attribute lock), and one
// about a failure carries the error (attribute error). Records are written
// after dlock's internal locks are released, so a slow handler delays no
// other lock. l must not be nil. Default: nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.fail(errs.InvalidArgf("WithLogger(nil)"))
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

// WithNodeTimeout bounds each request to one Redlock node: a node that has
// not answered by then counts as failed for that acquisition, renewal,
// release or TTL. It must be shorter than the TTL minus the drift allowance
// (see WithDriftFactor): a quorum that took longer would leave no validity.
// Zero means the default. Redlock only: New and Client.Mutex reject it with
// ErrInvalidArgument. Default: TTL/100 within [10ms, 500ms], and at most half
// the validity the drift allowance leaves (300ms for the default TTL).
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) {
		switch {
		case !c.redlock:
			c.fail(redlockOnly("WithNodeTimeout"))
		case d < 0:
			c.fail(errs.InvalidArgf("WithNodeTimeout(%v): must not be negative", d))
		default:
			c.nodeTimeout = d
		}
	}
}

// WithDriftFactor sets the share of the TTL that Redlock subtracts from a
// lease's validity for clock drift between this process and the nodes: the
// allowance is TTL × f + 2ms. f must be in [0, 1); zero keeps only the 2ms.
// Redlock only: New and Client.Mutex reject it with ErrInvalidArgument.
// Default: 0.01.
func WithDriftFactor(f float64) Option {
	return func(c *config) {
		switch {
		case !c.redlock:
			c.fail(redlockOnly("WithDriftFactor"))
		case !(f >= 0 && f < 1): // also rejects NaN
			c.fail(errs.InvalidArgf("WithDriftFactor(%v): must be in [0, 1)", f))
		default:
			c.driftFactor = f
		}
	}
}

// WithRetryDelay sets how long a waiting RedlockMutex.Lock sleeps between
// attempts when no release will wake it: after an attempt in which no owner
// held a quorum (contenders split the nodes), while too few nodes answer,
// and where pub/sub is unavailable. The delay is random and its range
// doubles from [min/2, min] after each attempt up to [max/2, max], so that
// clients whose attempts collided drift apart. It needs 1ms <= min <= max
// <= 1m; both zero mean the default. Redlock only: New and Client.Mutex reject it with
// ErrInvalidArgument. Default: 10ms and 200ms.
func WithRetryDelay(min, max time.Duration) Option {
	return func(c *config) {
		switch {
		case !c.redlock:
			c.fail(redlockOnly("WithRetryDelay"))
		case min == 0 && max == 0:
			d := defaultConfig()
			c.retryMin, c.retryMax = d.retryMin, d.retryMax
		case min < time.Millisecond || max < min || max > time.Minute:
			c.fail(errs.InvalidArgf("WithRetryDelay(%v, %v): delays must satisfy 1ms <= min <= max <= 1m", min, max))
		default:
			c.retryMin, c.retryMax = min, max
		}
	}
}

// WithReplicaAck makes a grant count only once replicas replicas hold it: an
// acquire sends WAIT replicas timeout on its script's connection right after
// the script, and so does every renewal and Extend. With acknowledgement from
// every replica of the master, a failover to any of them keeps the lock (see
// the README's table of deployments); without it, the master can die before
// a grant it replied to reaches the replica that takes over.
//
// An acquire acknowledged by fewer replicas releases the lock again (it
// passes to the next waiter) and fails with an error matching ErrReplicaAck;
// Lock does not retry it. A renewal acknowledged by fewer does not extend the
// lease's validity: it is retried like a failed renewal, and the lease is
// lost at its deadline if none is acknowledged (Extend returns the error). A
// lock handed over by a release was written by the releaser's connection, so
// the new holder re-arms it with WAIT before Lock returns; replication is
// ordered, so that acknowledgement covers the grant too.
//
// replicas 0 turns it off. It should not exceed the number of replicas the
// master has, or every acquire waits out the timeout and fails. timeout
// bounds each WAIT, zero meaning the default; it must be shorter than the
// TTL, and shorter than the Redis client's read timeout (go-redis: 3s by
// default), or a WAIT that runs out is read as a broken connection: both
// are checked (the read timeout where the driver tells it, as go-redis's
// does), and a longer timeout is ErrInvalidArgument. Works
// with Sentinel-managed masters (redis.NewFailoverClient) and on Cluster,
// where each WAIT goes to the master of its call's key. Latches grant
// nothing and ignore it; Redlock rejects it with ErrInvalidArgument (its
// nodes have no replicas). Default: 0 (off), with a timeout of 1s.
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(c *config) {
		switch {
		case c.redlock:
			c.fail(errs.InvalidArgf("WithReplicaAck does not apply to Redlock, whose nodes are independent masters without replicas"))
		case replicas < 0:
			c.fail(errs.InvalidArgf("WithReplicaAck(%d, %v): replicas must not be negative (0 turns it off)", replicas, timeout))
		case timeout < 0:
			c.fail(errs.InvalidArgf("WithReplicaAck(%d, %v): the timeout must not be negative (0 means the default)", replicas, timeout))
		default:
			if timeout == 0 {
				timeout = defaultConfig().replicaAckTimeout
			}
			c.replicaAck, c.replicaAckTimeout = replicas, timeout
		}
	}
}
