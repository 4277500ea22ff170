package dlock

import (
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/hold"
	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/wait"
	"github.com/dlock-go/dlock/internal/workers"
)

// RedisClient is the part of a go-redis v9 client that dlock uses.
// *redis.Client (standalone, or over Sentinel from redis.NewFailoverClient)
// and *redis.ClusterClient implement it, and so do wrappers that add hooks
// for tracing or metrics.
type RedisClient interface {
	// Do sends one command: a lone script call (EVALSHA, or EVAL when the
	// server does not have the script), and on a Cluster the COMMAND INFO
	// that tells whether its servers have SPUBLISH.
	Do(ctx context.Context, args ...interface{}) *redis.Cmd
	// Pipeline sends script calls made at the same time in one round trip,
	// and a script with the WAIT that WithReplicaAck adds after it.
	Pipeline() redis.Pipeliner
	// Subscribe opens the pub/sub connection on which waiters hear
	// releases (SUBSCRIBE), except on a Cluster with sharded pub/sub.
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	// SSubscribe is sharded pub/sub (Redis 7.0 and later). On a Cluster,
	// dlock calls it on the ClusterClient's node clients, one per master,
	// rather than on the client given to New.
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
}

var (
	_ RedisClient = (*redis.Client)(nil)
	_ RedisClient = (*redis.ClusterClient)(nil)
)

// Client creates locks on one Redis deployment and owns the machinery they
// share: one pub/sub subscription that wakes every waiter, and one watchdog
// that renews every held lease. Create one Client per process and deployment
// and share it; it is safe for concurrent use. Close it when done.
type Client struct {
	drv      driver.Driver
	cfg      config
	notify   *notify.Notifier
	wd       *hold.Watchdog
	instance string // random id of this Client, scoping reentrant owners
	// grantTag names this Client's grant channels (lockKeys.grants), and
	// fairTimings is the Client's timings argument with it (fair.go).
	grantTag, fairTimings string
	anchors               anchorSet // reentrant owners' shared renewals

	cleanups  *workers.Pool // abandoned acquires being cleaned up; after Close, in the caller
	local     mutexLine     // Mutex waiters sharing one place per name
	places    wait.Places   // other waiters' places, kept together per lock
	waits     wait.Engine   // the wait for a lock, over notify and places
	closeOnce sync.Once
	closed    chan struct{}
}

// New returns a Client over rdb, a go-redis v9 client. opts set the defaults
// of every lock made by the Client. It returns ErrInvalidArgument for a nil
// client or an invalid option; it sends nothing to Redis.
//
// The Client does not own rdb: Close does not close it.
func New(rdb RedisClient, opts ...Option) (*Client, error) {
	if isNilClient(rdb) {
		return nil, errs.InvalidArgf("New: nil Redis client")
	}
	return NewWithDriver(goredis.New(rdb), opts...)
}

// NewWithDriver returns a Client that reaches Redis through d. It is how
// adapters for other Redis client libraries plug in; see package driver.
func NewWithDriver(d driver.Driver, opts ...Option) (*Client, error) {
	if d == nil {
		return nil, errs.InvalidArgf("NewWithDriver: nil driver")
	}
	cfg := defaultConfig()
	if rt, ok := d.(driver.ReplyTimeouter); ok {
		cfg.replyTimeout = rt.ReplyTimeout()
	}
	for _, opt := range opts {
		if opt == nil {
			return nil, errs.InvalidArgf("New: nil Option")
		}
		opt(&cfg)
	}
	if err := cfg.err(); err != nil {
		return nil, errs.Errorf("dlock: New: %w", err)
	}
	c := &Client{drv: d, cfg: cfg, instance: NewOwnerID(), closed: make(chan struct{}), cleanups: workers.New()}
	c.cfg.seal(nil)
	c.anchors.init()
	c.grantTag = c.instance[:grantTagLen]
	c.fairTimings = tagTimings(c.grantTag, c.cfg.timings)
	c.notify = notify.New(d, cfg.logger)
	c.waits = wait.Engine{Notify: c.notify, Places: &c.places, Driver: d, Closed: c.closed}
	c.wd = hold.NewWatchdog(d)
	return c, nil
}

// isNilClient reports whether rdb is nil, or a nil pointer (or other nil
// reference) of any type, such as a wrapper that adds hooks: its methods
// would panic at the first command.
func isNilClient(rdb RedisClient) bool {
	if rdb == nil {
		return true
	}
	switch v := reflect.ValueOf(rdb); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// Close stops the Client's goroutines: the watchdog, the subscription, and
// the driver's. Waits in progress end with ErrClosed. Leases still held
// stop being renewed: their Done channels close with ErrLockLost, and their
// keys expire one TTL after the last renewal (Close does not release them,
// because their holders may still be working; Unlock them first, or after:
// Unlock still releases a lock after Close, as long as the Redis client is
// open).
//
// Close waits for the clean-up of waits that gave up (leaving their queues),
// for commands that calls abandoned at their deadline and for the pub/sub
// connection to close, but returns within the release timeout. What is
// still without a reply then is waiting on a server that stopped answering,
// with a Redis client that gives it more time (a ReadTimeout longer than
// the release timeout, or none): Close returns an error matching
// context.DeadlineExceeded, and the goroutine waiting ends when the Redis
// client gives up (closing that client ends it at once). Otherwise Close
// returns nil. It is idempotent: later calls return nil.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		deadline := time.Now().Add(c.cfg.releaseTimeout)
		close(c.closed)
		c.local.Close()
		c.cleanups.Close() // each clean-up ends by the release timeout
		c.wd.Close()
		// The subscription too: closing it may wait for a server that
		// stopped answering (the adapters' drivers).
		err = closeWithin(deadline, "Close", func() {
			c.notify.Close()
			if closer, ok := c.drv.(interface{ Close() error }); ok {
				_ = closer.Close()
			}
		})
	})
	return err
}

// closeWithin runs stop, which waits for commands in flight, and returns
// when it does or at deadline, whichever comes first; in the second case,
// stop goes on in a goroutine of its own, which ends with the last of those
// commands, and the error says so. what names the method in the error.
func closeWithin(deadline time.Time, what string, stop func()) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		stop()
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		select {
		case <-done: // both ready: stop did finish
			return nil
		default:
		}
		return errs.Errorf("dlock: %s: Redis commands abandoned at their deadline (or the pub/sub connection being closed) were still "+
			"without a reply at the release timeout; they end when the Redis client gives up on them (its read timeout) or is closed: %w",
			what, context.DeadlineExceeded)
	}
}

// checkOpen returns ErrClosed for op on the lock called name once the
// Client is closed.
func (c *Client) checkOpen(op, name string) error {
	select {
	case <-c.closed:
		return errs.Closedf(op, name)
	default:
		return nil
	}
}

// Mutex returns the mutual-exclusion lock called name. opts override the
// Client's defaults for this lock. It sends nothing and never fails: an
// invalid name or option is reported by the first TryLock or Lock. A Mutex is
// a cheap, immutable descriptor, safe for concurrent use; any number of them
// may name the same lock.
func (c *Client) Mutex(name string, opts ...Option) *Mutex { return c.newMutex("Mutex", name, opts) }

// newMutex is Mutex for a kind of lock built on it: kind names it in errors.
func (c *Client) newMutex(kind, name string, opts []Option) *Mutex {
	m := &Mutex{c: c, name: name}
	m.err = c.lockConfig(&m.cfg, kind, name, opts)
	m.keys = newLockKeys(m.cfg.keyPrefix, name)
	return m
}

// lockConfig sets *dst to a lock's options over the Client's defaults and
// validates them with the name; the error is reported on the lock's first
// use, since constructors of locks never fail.
func (c *Client) lockConfig(dst *config, kind, name string, opts []Option) error {
	err := c.applyOptions(dst, kind, name, opts)
	if nerr := checkName(name); nerr != nil {
		return errs.Errorf("dlock: %s: %w", kind, nerr)
	}
	return err
}

// applyOptions sets *dst to a lock's options over the Client's defaults;
// label names the lock in errors. dst is the lock's own field: options
// applied there cost no copy of the configuration on the heap, and seal
// takes the derived values from the Client's cache, so that options given
// per call cost what the same options given to New do.
func (c *Client) applyOptions(dst *config, kind, label string, opts []Option) error {
	*dst = c.cfg
	if len(opts) == 0 {
		return nil // the Client's defaults were checked and sealed by New
	}
	dst.errs = nil
	for _, opt := range opts {
		if opt == nil {
			dst.fail(errs.InvalidArgf("nil Option"))
			continue
		}
		opt(dst)
	}
	if err := dst.err(); err != nil {
		return errs.Errorf("dlock: %s(%q): %w", kind, label, err)
	}
	dst.seal(&c.cfg)
	return nil
}

// Do runs fn while holding the lock called name: it waits for the lock (like
// Mutex.Lock), runs fn with a context that is cancelled, with cause
// ErrLockLost, if the lock is lost, and always releases the lock, even when
// ctx is cancelled or fn panics. It returns fn's error; when the lock was lost
// the error also matches ErrLockLost, and when the release failed it carries
// that failure too. When the lock is not obtained, fn does not run and the
// error is Lock's: it matches ErrNotObtained when the wait ended first,
// ErrClosed when the Client is closed, ErrInvalidArgument for a bad name or
// option, or ErrKeyConflict. Failures to reach Redis are retried while ctx
// allows, as in every wait: with a ctx that never ends, Do waits through an
// outage; give it a deadline to bound that (the error then matches
// ErrNotObtained and carries the last failure), or use WithWaitTimeout to
// bound the wait alone. fn reaches the lease, and its fencing token,
// through LeaseFromContext.
func (c *Client) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	if fn == nil {
		return errs.InvalidArgf("Do(%q): nil function", name)
	}
	m := c.Mutex(name, opts...)
	return do(ctx, m, fn)
}
