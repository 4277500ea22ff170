package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/hold"
	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/workers"
)

// Redlock makes locks over N independent Redis masters with the Redlock
// algorithm: a lock is held while a quorum (N/2+1) of the nodes hold its key,
// so it survives the loss of up to (N-1)/2 nodes without relying on
// replication, at the price of fencing tokens (see docs/redlock.md). It
// owns one watchdog that renews every lease it granted. Create one per
// process and set of nodes and share it; it is safe for concurrent use.
// Close it when done.
type Redlock struct {
	nodes []redlockNode
	cfg   config
	wd    *hold.Watchdog

	closeOnce sync.Once
	closed    chan struct{}

	// workers send the node requests of fan-outs (internal/workers); Close
	// waits for those still running.
	workers *workers.Pool
	line    redlockLine // Lock calls waiting, one line per name (redlock_wait.go)
	ears    redlockEars // their listeners, one per name
	// lineID names this Redlock's lines on the nodes, where the line that
	// has waited longest asks first after a release (redlock_wait.go).
	lineID string
}

type redlockNode struct {
	addr   string
	drv    *goredis.Driver
	notify *notify.Notifier // the node's subscription, for waiters (redlock_wait.go)
	health *nodeHealth      // whether it answers (redlock_silent.go)
}

// NewRedlock returns a Redlock over nodes, one standalone go-redis client per
// independent Redis master: no replication between them, and no server
// reachable through two clients (nodes are told apart by the address in their
// options, as written). Use an odd number of nodes, usually 3 or 5; an even
// number is accepted with a warning in the log. opts set the defaults of its
// locks: besides the common options, WithNodeTimeout, WithDriftFactor and
// WithRetryDelay apply, and WithWaitStrategy and WithWaiterLease are rejected.
//
// It returns ErrInvalidArgument, sending nothing to Redis, for no nodes, a nil
// node, a node that is not a standalone client, two nodes with one address,
// or an invalid option. Create the clients with ContextTimeoutEnabled, so that
// a request to a node that stops answering ends at the node timeout. The
// Redlock does not own the clients: Close does not close them.
func NewRedlock(nodes []RedisClient, opts ...Option) (*Redlock, error) {
	if len(nodes) == 0 {
		return nil, errs.InvalidArgf("NewRedlock: no nodes")
	}
	r := &Redlock{closed: make(chan struct{}), workers: workers.New()}
	seen := make(map[string]int, len(nodes))
	for i, rdb := range nodes {
		addr, err := redlockNodeAddr(rdb)
		if err != nil {
			return nil, errs.InvalidArgf("NewRedlock: node %d: %v", i, err)
		}
		if j, dup := seen[addr]; dup {
			return nil, errs.InvalidArgf("NewRedlock: nodes %d and %d both address %s: Redlock needs distinct, independent masters", j, i, addr)
		}
		seen[addr] = i
		r.nodes = append(r.nodes, redlockNode{addr: addr, drv: goredis.New(rdb), health: new(nodeHealth)})
	}
	cfg := defaultConfig()
	cfg.redlock = true
	base := cfg
	for _, opt := range opts {
		if opt == nil {
			return nil, errs.InvalidArgf("NewRedlock: nil Option")
		}
		opt(&cfg)
	}
	if err := cfg.err(); err != nil {
		return nil, errs.Errorf("dlock: NewRedlock: %w", err)
	}
	if err := checkRedlockConfig(&cfg, &base); err != nil {
		return nil, errs.Errorf("dlock: NewRedlock: %w", err)
	}
	r.cfg = cfg
	if n := len(r.nodes); n%2 == 0 {
		// Accepted (a test may run 2 or 4 nodes), but never what a
		// deployment wants: the extra node buys no tolerance.
		cfg.logger.Warn("dlock: a Redlock over an even number of nodes survives no more node failures than one over a node fewer; use an odd number (3 or 5)",
			slog.Int("nodes", n), slog.Int("quorum", quorum(n)), slog.Int("failures_tolerated", n-quorum(n)))
	}
	lineID, err := ownerid.CallID()
	if err != nil {
		return nil, err
	}
	r.lineID = lineID
	r.wd = hold.NewWatchdog(nil)
	r.line.HandToHead = true // no queue on the nodes orders the waiters
	for i := range r.nodes {
		r.nodes[i].notify = notify.New(r.nodes[i].drv, cfg.logger)
	}
	return r, nil
}

// redlockNodeAddr returns the address that identifies a node, or why rdb
// cannot be one.
func redlockNodeAddr(rdb RedisClient) (string, error) {
	if isNilClient(rdb) {
		return "", errors.New("nil Redis client")
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return "", errors.New("a Cluster client: Redlock needs independent masters, one *redis.Client each (for a Cluster, use dlock.New)")
	case interface{ Options() *redis.Options }:
		addr := c.Options().Addr
		if addr == "FailoverClient" { // what go-redis's NewFailoverClient sets
			return "", errors.New("a Sentinel failover client: a failover can replace a node's master with a replica that lacks its locks; Redlock needs independent masters")
		}
		return addr, nil
	}
	return "", fmt.Errorf("%T is not a *redis.Client: Redlock identifies each node by its address", rdb)
}

// checkRedlockConfig rejects what the options cannot express one at a time:
// options of the single-node queue (changed from base), and a TTL, drift
// factor and node timeout that leave no validity.
func checkRedlockConfig(cfg, base *config) error {
	if cfg.waitSet {
		return errs.InvalidArgf("WithWaitStrategy does not apply to Redlock: its waiters are woken by releases on the nodes, " +
			"and retry after a random delay (see WithRetryDelay) only when they cannot be")
	}
	if cfg.waiterLease != base.waiterLease {
		return errs.InvalidArgf("WithWaiterLease does not apply to Redlock, which has no queue")
	}
	px := redlockPX(cfg)
	d := redlockDrift(px, cfg.driftFactor)
	if px <= d {
		return errs.InvalidArgf("a TTL of %v leaves no validity after the drift allowance of %v (TTL × %v + 2ms)", px, d, cfg.driftFactor)
	}
	if nt := redlockNodeTimeout(cfg); nt >= px-d {
		return errs.InvalidArgf("the node timeout %v must be shorter than the TTL %v minus the drift allowance %v", nt, px, d)
	}
	return nil
}

// Mutex returns the Redlock mutual-exclusion lock called name. opts override
// the Redlock's defaults for this lock. It sends nothing and never fails: an
// invalid name or option is reported by the first TryLock or Lock. A
// RedlockMutex is a cheap, immutable descriptor, safe for concurrent use;
// any number of them may name the same lock.
func (r *Redlock) Mutex(name string, opts ...Option) *RedlockMutex {
	// The options write to the descriptor's copy of the defaults: a local
	// copy would escape to them (they are func values) and cost one more
	// allocation per call.
	m := &RedlockMutex{r: r, name: name, cfg: r.cfg}
	cfg := &m.cfg
	cfg.errs = nil
	for _, opt := range opts {
		if opt == nil {
			cfg.fail(errs.InvalidArgf("Redlock.Mutex(%q): nil Option", name))
			continue
		}
		opt(cfg)
	}
	m.key = newLockKeys(cfg.keyPrefix, name).lock
	m.linesKey = m.key + ":lines"
	if err := checkName(name); err != nil {
		m.err = errs.Errorf("dlock: Redlock.Mutex: %w", err)
	} else if err := cfg.err(); err != nil {
		m.err = errs.Errorf("dlock: Redlock.Mutex(%q): %w", name, err)
	} else if err := checkRedlockConfig(cfg, &r.cfg); err != nil {
		m.err = errs.Errorf("dlock: Redlock.Mutex(%q): %w", name, err)
	}
	return m
}

// Do runs fn while holding the Redlock lock called name: it waits for the
// lock (like RedlockMutex.Lock), runs fn with a context that is cancelled,
// with cause ErrLockLost, if the lock is lost, and always releases the lock,
// even when ctx is cancelled or fn panics. It returns fn's error; when the
// lock was lost the error also matches ErrLockLost, and when the release
// failed it carries that failure too. When the lock is not obtained, fn does
// not run and the error is Lock's. Lock retries while too few nodes answer,
// for as long as ctx allows: with a ctx that never ends, Do waits through
// an outage of the nodes; give it a deadline, or WithWaitTimeout, to bound
// that. fn reaches the lease through LeaseFromContext.
func (r *Redlock) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	if fn == nil {
		return errs.InvalidArgf("Redlock.Do(%q): nil function", name)
	}
	m := r.Mutex(name, opts...)
	return do(ctx, m, fn)
}

// Close stops the Redlock's watchdog. Waits in progress end with ErrClosed;
// leases still held stop being renewed, and their Done closes with
// ErrLockLost (Close releases nothing: Unlock them first, which still works
// after Close). Close waits for the node requests still running, up to the
// release timeout, and returns an error matching context.DeadlineExceeded
// if some are still running then; otherwise nil. Later calls return nil.
// Close does not close the nodes' clients.
func (r *Redlock) Close() error {
	var err error
	r.closeOnce.Do(func() {
		deadline := time.Now().Add(r.cfg.releaseTimeout)
		close(r.closed)
		r.line.Close()
		r.wd.Close()
		err = closeWithin(deadline, "Redlock.Close", func() {
			for _, n := range r.nodes {
				n.notify.Close()
			}
			r.workers.Close()
			for _, n := range r.nodes {
				_ = n.drv.Close() // the drivers' own goroutines (batching)
			}
		})
	})
	return err
}

// checkOpen returns ErrClosed for op on the lock called name once the
// Redlock is closed.
func (r *Redlock) checkOpen(op, name string) error {
	select {
	case <-r.closed:
		return errs.Closedf(op, name)
	default:
		return nil
	}
}

// RedlockMutex is a mutual-exclusion lock over a Redlock's nodes: a Lease
// holds it while a quorum of the nodes hold its key, the same key as a
// Mutex's on every node. Get one from Redlock.Mutex; it is an immutable
// descriptor, safe for concurrent use, and cheap to create per call.
//
// Waiters do not queue on the nodes, so grants do not follow arrival order
// across processes; the nodes only say which process has waited longest,
// and it asks first after a release. Its leases carry no fencing token
// (Lease.Token returns 0). Unlock returns once a quorum of the nodes, and
// every node that answers, released the key; a node that does not answer
// is released in the background. See docs/redlock.md.
type RedlockMutex struct {
	r    *Redlock
	name string
	key  string
	// linesKey lists, on each node, the processes' lines waiting for the
	// lock (redlock_acquire.lua): the longest waiting asks first.
	linesKey string
	cfg      config
	err      error // invalid name or option, reported by TryLock and Lock
}

var _ Locker = (*RedlockMutex)(nil)

// Name returns the lock's name.
func (m *RedlockMutex) Name() string { return m.name }

// TryLock makes one attempt to take the lock: it asks every node at once and
// returns when a quorum has granted it, or when every node has answered or
// the node timeout has passed. What a failed attempt took is released again.
// It returns an error matching ErrNotObtained when another owner holds the
// lock on too many nodes to leave a quorum, and ErrQuorum when fewer than a
// quorum of the nodes answered in time, or the quorum answered too late to
// leave any validity; each failed node is a *NodeError in the error. When
// both happen, the error matches ErrNotObtained unless fewer than a quorum
// answered. It also returns ErrInvalidArgument, ErrClosed, and ctx's error
// (not matching ErrNotObtained) when ctx ends first. The caller must Unlock
// the returned Lease.
func (m *RedlockMutex) TryLock(ctx context.Context) (*Lease, error) {
	if m.cfg.observer != nil && m.err == nil {
		return observeAcquire(ctx, &m.cfg, KindMutex, m.name, "TryLock", m.tryLock)
	}
	return m.tryLock(ctx)
}

func (m *RedlockMutex) tryLock(ctx context.Context) (*Lease, error) {
	if err := m.usable(); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, errs.TryEnded(ctx, "TryLock", m.name)
	}
	owner, err := ownerid.New(m.cfg.ownerInfo)
	if err != nil {
		return nil, err
	}
	res := m.attempt(ctx, "TryLock", owner, nil)
	switch {
	case res.hold != nil:
		return m.lease(ctx, owner, res)
	case res.err == nil: // ctx ended
		return nil, errs.TryEnded(ctx, "TryLock", m.name)
	}
	return nil, res.err
}

// Lock takes the lock, attempting as TryLock does and again, as long as ctx
// allows, when the holder's release is heard, when its keys could have
// expired, or after a random delay (WithRetryDelay) when no owner holds a
// quorum or too few nodes answer. Lock calls of one Redlock for one name take
// turns, in arrival order. When ctx ends first, the error matches
// ErrNotObtained and ctx's error and carries the last attempt's failure; what
// an attempt still in flight takes is released in the background. It returns
// at once with ErrInvalidArgument, ErrClosed (also matching ErrNotObtained for
// a Lock already waiting), or ErrQuorum when too many nodes answer with errors
// retrying cannot fix, such as ErrKeyConflict. The caller must Unlock the
// returned Lease.
func (m *RedlockMutex) Lock(ctx context.Context) (*Lease, error) {
	ctx, cancel := m.cfg.boundWait(ctx)
	defer cancel()
	if m.cfg.observer != nil && m.err == nil {
		return observeAcquire(ctx, &m.cfg, KindMutex, m.name, "Lock", m.lock)
	}
	return m.lock(ctx)
}

// usable reports an invalid descriptor or a closed Redlock.
func (m *RedlockMutex) usable() error {
	if m.err != nil {
		return m.err
	}
	return m.r.checkOpen("Redlock", m.name)
}

// lease turns a granted attempt into a Lease watched by the Redlock's
// watchdog. Its validity counts from the start of the attempt.
func (m *RedlockMutex) lease(ctx context.Context, owner string, res acquireResult) (*Lease, error) {
	return newLease(ctx, m.r.wd, res.hold, &m.cfg, owner, 0, res.start, res.px)
}

func (m *RedlockMutex) drift(px time.Duration) time.Duration {
	return redlockDrift(px, m.cfg.driftFactor)
}
