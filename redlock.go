package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/notify"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/internal/workers"
)

// Redlock makes locks over N independent Redis masters with the Redlock
// algorithm: a lock is held while a quorum (N/2+1) of the nodes hold its key,
// so it survives the loss of up to (N-1)/2 nodes without relying on
// replication, at the price of fencing tokens (see the package
// documentation, "Redlock"). It owns one watchdog that renews every lease it
// granted. Create one per process and set of nodes and share it; it is safe
// for concurrent use. Close it when done.
type Redlock struct {
	nodes []redlockNode
	cfg   config
	wd    *watchdog

	closeOnce sync.Once
	closed    chan struct{}

	// workers send the node requests of fan-outs (internal/workers); Close
	// waits for those still running.
	workers *workers.Pool
	gates   redlockGates // one waiting Lock per name in Redis (redlock_wait.go)
}

type redlockNode struct {
	addr   string
	drv    *goredis.Driver
	notify *notify.Notifier // the node's subscription, for waiters (redlock_wait.go)
	health *nodeHealth      // whether it answers (redlock_silent.go)
}

// NewRedlock returns a Redlock over nodes, one go-redis client
// (*redis.Client) per independent Redis master: no replication between them,
// and no node reachable through two clients. opts set the defaults of every
// lock made by the Redlock. Besides the common options, WithNodeTimeout,
// WithDriftFactor and WithRetryDelay apply; WithWaitStrategy and
// WithWaiterLease, which tune the single-node queue, are rejected.
//
// It returns ErrInvalidArgument, sending nothing to Redis, for: no nodes; a
// nil node; a node that is not a standalone client (a Cluster client, a
// Sentinel failover client, or a type it cannot take an address from); two
// nodes with the same address; a drift factor outside [0, 1); a node timeout
// that is not shorter than the TTL minus the drift allowance (so never as
// long as the TTL); or any other invalid option. Nodes are identified by the
// address in their options, as written: one server under two names
// ("localhost:6379" and "127.0.0.1:6379") is not detected and would count
// twice towards a quorum. Use an odd number of nodes, usually 3 or 5: an
// even number is accepted, with a warning in the log (WithLogger), since
// it tolerates no more failed nodes than one node fewer.
//
// Create the clients with ContextTimeoutEnabled: true, so that a request to
// a node that stops answering ends at the node timeout. Without it go-redis
// ignores context deadlines: Redlock still stops waiting at the node timeout,
// but the request keeps its connection (and Close waits for it) until the
// client's ReadTimeout. The Redlock does not own the clients: Close does not
// close them.
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
	r.wd = newWatchdog(nil)
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

// quorum is how many of n nodes must agree.
func quorum(n int) int { return n/2 + 1 }

// redlockDrift is Redlock's drift allowance for a hold of px: px × factor +
// 2ms (the Redlock paper's clock drift plus Redis's expiry resolution).
func redlockDrift(px time.Duration, factor float64) time.Duration {
	return time.Duration(float64(px)*factor) + 2*time.Millisecond
}

// redlockPX is the expiry a grant sets: the TTL, or the hold cap when that is
// shorter, in whole milliseconds as Redis takes it.
func redlockPX(cfg *config) time.Duration {
	px := cfg.ttl
	if cfg.maxHold > 0 && cfg.maxHold < px {
		px = cfg.maxHold
	}
	return px.Truncate(time.Millisecond)
}

// redlockNodeTimeout is the node timeout in force for cfg.
func redlockNodeTimeout(cfg *config) time.Duration {
	if cfg.nodeTimeout > 0 {
		return cfg.nodeTimeout
	}
	px := redlockPX(cfg)
	return defaultNodeTimeout(px, redlockDrift(px, cfg.driftFactor))
}

// Mutex returns the Redlock mutual-exclusion lock called name. opts override
// the Redlock's defaults for this lock. It sends nothing and never fails: an
// invalid name or option is reported by the first TryLock or Lock. A
// RedlockMutex is a cheap, immutable descriptor, safe for concurrent use;
// any number of them may name the same lock.
func (r *Redlock) Mutex(name string, opts ...Option) *RedlockMutex {
	cfg := r.cfg
	cfg.errs = nil
	for _, opt := range opts {
		if opt == nil {
			cfg.fail(errs.InvalidArgf("Redlock.Mutex(%q): nil Option", name))
			continue
		}
		opt(&cfg)
	}
	m := &RedlockMutex{r: r, name: name, cfg: cfg, key: newLockKeys(cfg.keyPrefix, name).lock}
	m.keys = []string{m.key}
	if err := checkName(name); err != nil {
		m.err = errs.Errorf("dlock: Redlock.Mutex: %w", err)
	} else if err := cfg.err(); err != nil {
		m.err = errs.Errorf("dlock: Redlock.Mutex(%q): %w", name, err)
	} else if err := checkRedlockConfig(&cfg, &r.cfg); err != nil {
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
// an outage of the nodes; give it a deadline to bound that.
func (r *Redlock) Do(ctx context.Context, name string, fn func(ctx context.Context) error, opts ...Option) error {
	if fn == nil {
		return errs.InvalidArgf("Redlock.Do(%q): nil function", name)
	}
	return do(ctx, r.Mutex(name, opts...), fn)
}

// Close stops the Redlock's watchdog. Waits in progress end with ErrClosed.
// Leases still held stop being renewed: their Done channels close with
// ErrLockLost, and their keys expire one TTL after the last renewal (Close
// does not release them, because their holders may still be working; Unlock
// them first, which still works after Close). Close does not close the
// nodes' clients.
//
// Close waits for the node requests still running, but returns within the
// release timeout. A request still without a reply then is one its node's
// client gives more time (a ReadTimeout longer than the release timeout, or
// none) on a node that stopped answering: Close returns an error matching
// context.DeadlineExceeded, and the request's goroutine ends when the
// client returns it (closing the client ends it at once). Otherwise Close
// returns nil. It is idempotent: later calls return nil.
func (r *Redlock) Close() error {
	var err error
	r.closeOnce.Do(func() {
		deadline := time.Now().Add(r.cfg.releaseTimeout)
		close(r.closed)
		r.wd.close()
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
// holds it while a quorum of the nodes hold its key, which is the same key
// as a Mutex's (prefix + "{" + name + "}") on every node. Get one from
// Redlock.Mutex; it is an immutable descriptor, safe for concurrent use, and
// cheap to create per call.
//
// Unlike Mutex, waiters do not queue on the nodes: a release wakes one
// waiting Lock per process (the others of that process wait their turn
// behind it, in arrival order), and those race for the lock, so grants do
// not follow arrival order across processes. An Unlock hands the lock
// straight to its own Redlock's first waiter for it, up to 7 times in a
// row. Its leases carry no fencing token (Lease.Token returns 0). Lease.TTL
// reports how long a quorum of the nodes still hold the key.
//
// Unlock returns once a quorum of the nodes released the key and every node
// that answers has: it returns nil then, and a node that did not answer
// its last request (down, frozen, unreachable) is released in the
// background (Close waits for it; a failure is logged, and the key there
// expires by its TTL). Only a node that stops answering unnoticed, during
// the Unlock or just before it, is waited for, up to the node timeout.
type RedlockMutex struct {
	r    *Redlock
	name string
	key  string
	keys []string // {key}, shared by every call's Keys
	cfg  config
	err  error // invalid name or option, reported by TryLock and Lock
}

var _ Locker = (*RedlockMutex)(nil)

// Name returns the lock's name.
func (m *RedlockMutex) Name() string { return m.name }

// TryLock makes one attempt to take the lock: it asks every node at once and
// returns when a quorum has granted it, or when every node has answered or
// the node timeout has passed. A node that did not answer its last request
// (down, frozen, unreachable) is not waited for once the others have
// answered: it delays only the first call that meets it, by up to the node
// timeout. When it returns without a Lease, the nodes that granted their
// share have released it again (the others are sent a release in the
// background, once their request has returned). It returns:
//   - an error matching ErrNotObtained when another owner holds the lock on
//     enough nodes that no quorum is left for us;
//   - ErrQuorum when fewer than a quorum of the nodes answered (down,
//     unreachable, slower than the node timeout, or answering with errors;
//     each is a *NodeError in the error), or when the quorum answered too late
//     to leave any validity.
//
// When both happen, ErrQuorum wins only if the nodes that answered are fewer
// than a quorum: then even a free lock could not have been taken, and the
// outage is what needs fixing; otherwise contention decided it, and the
// error matches ErrNotObtained and carries the *NodeErrors as well. TryLock
// also returns ErrInvalidArgument for an invalid name or option, ErrClosed
// after Redlock.Close, and the context's error (wrapped, not matching
// ErrNotObtained, as Mutex.TryLock) when ctx ends first. The caller must
// Unlock the returned Lease.
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
	res := m.attempt(ctx, "TryLock", owner)
	switch {
	case res.hold != nil:
		return m.lease(ctx, owner, res)
	case res.err == nil: // ctx ended
		return nil, errs.TryEnded(ctx, "TryLock", m.name)
	}
	return nil, res.err
}

// Lock takes the lock, attempting as TryLock does and attempting again as
// long as ctx allows: when the owner that holds it releases it (heard by
// pub/sub on the nodes) or its keys could have expired, and after a random
// delay (WithRetryDelay) when no owner holds a quorum (a split vote) or too
// few nodes answer. Lock calls of one Redlock for one name take turns: the
// others wait, in arrival order, until the first returns. What a node that
// does not answer is owed (the release of a failed attempt's share, a
// subscription) goes on in the background, and its attempts do not wait
// for it once it is known silent (see TryLock). When ctx ends first, Lock
// returns then, even with an attempt still waiting for nodes that do not
// answer, or an Unlock of the same Redlock still handing the lock over to
// it: what that attempt may have taken, or that hand-off delivers, is
// released in the background (Close waits for it). The error
// matches ErrNotObtained and ctx's error and carries the last attempt's
// failure (which may match ErrQuorum). It returns at once with
// ErrInvalidArgument, with ErrClosed when the Redlock is closed (a Lock
// already waiting when Close is called returns an error matching both
// ErrClosed and ErrNotObtained), and with ErrQuorum when more nodes than a
// quorum can spare answer with errors that retrying cannot fix, such as
// ErrKeyConflict. The caller must Unlock the returned Lease.
func (m *RedlockMutex) Lock(ctx context.Context) (*Lease, error) {
	if m.cfg.observer != nil && m.err == nil {
		return observeAcquire(ctx, &m.cfg, KindMutex, m.name, "Lock", m.lock)
	}
	return m.lock(ctx)
}

func (m *RedlockMutex) lock(ctx context.Context) (lease *Lease, err error) {
	if err := m.usable(); err != nil {
		return nil, err
	}
	began := time.Now()
	if ctx.Err() != nil {
		return nil, errs.WaitEnded(ctx, m.name, began, 0, nil)
	}
	owner, err := ownerid.New(m.cfg.ownerInfo)
	if err != nil {
		return nil, err
	}
	turn, err := m.r.gates.enter(ctx, m.r.closed, m)
	switch {
	case errors.Is(err, ErrClosed):
		return nil, errors.Join(ErrClosed, errs.WaitEnded(ctx, m.name, began, 0, nil))
	case err != nil:
		return nil, errs.WaitEnded(ctx, m.name, began, 0, nil)
	}
	defer func() { turn.leave(ctx, lease != nil) }()
	// wait.l is nil until the turn must wait (see redlockGates.enter).
	wait := redlockWait{m: m, l: turn.gt.l, spin: newSpinDelay(SpinWait(m.cfg.retryMin, m.cfg.retryMax))}
	var (
		holderTTL time.Duration
		last      error
		timer     *time.Timer // made when the Lock first waits
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for first := true; ; first = false {
		if turn.handingOver() {
			// An Unlock of this Redlock is handing the lock over: its
			// outcome comes within a node timeout (after the old lease's
			// stragglers). A ctx that ends first ends the Lock: leave
			// releases the outcome in the background.
			select {
			case h := <-turn.handoff:
				if got, ok, err := m.takeHandoff(ctx, turn, h); ok {
					return got, err
				}
				continue
			case <-ctx.Done():
				return nil, errs.WaitEnded(ctx, m.name, began, holderTTL, last)
			case <-m.r.closed:
				return nil, errors.Join(ErrClosed, errs.WaitEnded(ctx, m.name, began, holderTTL, last))
			}
		}
		heard := wait.l != nil && wait.l.hears()
		var (
			delay time.Duration
			wake  bool
		)
		if first && turn.inherited && heard {
			// This process holds the lock: its Unlock hands it over or
			// publishes the release. Asking the nodes now would only
			// find it held.
			delay, wake = wait.idle(0), true
		} else {
			if wait.l != nil {
				wait.l.drain()
			}
			res := m.attempt(ctx, "Lock", owner)
			switch {
			case res.hold != nil:
				return m.lease(ctx, owner, res)
			case res.err == nil: // ctx ended
				return nil, errs.WaitEnded(ctx, m.name, began, holderTTL, last)
			case res.permanent:
				return nil, res.err
			}
			if res.spent {
				// A give-back of that attempt may still be on its way to
				// a node: as the same owner, the next attempt's share
				// there could be deleted after its grant (see attempt).
				if owner, err = ownerid.New(m.cfg.ownerInfo); err != nil {
					return nil, err
				}
			}
			holderTTL, last = res.holderTTL, res.err
			var nerr *errs.NotObtainedError
			if errors.As(res.err, &nerr) {
				last = nerr.Last // contention is what the wait is about: keep only node failures
			}
			if wait.l == nil {
				// No subscription could have heard a release during the
				// attempt, so heard is false and the wait subscribes now
				// and asks again.
				wait.l = turn.listener()
			}
			delay, wake = wait.next(ctx, res, heard)
			if delay == 0 && ctx.Err() == nil {
				continue
			}
		}
		var signal <-chan struct{}
		if wake {
			signal = wait.l.signal
		}
		if timer == nil {
			timer = time.NewTimer(delay)
		} else {
			timer.Reset(delay)
		}
		select {
		case <-signal:
		case h := <-turn.handoff:
			if got, ok, err := m.takeHandoff(ctx, turn, h); ok {
				return got, err
			}
		case <-timer.C:
		case <-ctx.Done():
			return nil, errs.WaitEnded(ctx, m.name, began, holderTTL, last)
		case <-m.r.closed:
			return nil, errors.Join(ErrClosed, errs.WaitEnded(ctx, m.name, began, holderTTL, last))
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// takeHandoff takes the outcome of a hand-off to turn: the lease (ok) or,
// when it failed, nothing: the Lock attempts again.
func (m *RedlockMutex) takeHandoff(ctx context.Context, turn *redlockTurn, h redlockHandoff) (*Lease, bool, error) {
	turn.received()
	if h.res.hold == nil {
		return nil, false, nil
	}
	lease, err := m.lease(ctx, h.owner, h.res)
	return lease, true, err
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

// acquireResult is the outcome of one acquisition attempt on every node.
type acquireResult struct {
	hold  *redlockHold // granted: the lease's holder
	start time.Time    // when the attempt began; validity counts from here
	px    time.Duration
	// Not granted: err matches ErrNotObtained or ErrQuorum, or is nil when
	// ctx ended; holderTTL is when enough nodes could be free (0: unknown);
	// permanent means retrying cannot help.
	err       error
	holderTTL time.Duration
	permanent bool
	held      int // the most nodes one other owner holds
	// spent: a give-back of the attempt may still reach a node, at any
	// time; the attempt's owner value must not be used again.
	spent bool
}

// acquireVerdict is what one attempt's tally means.
type acquireVerdict uint8

const (
	verdictGranted    acquireVerdict = iota
	verdictTooSlow                   // a quorum granted it, but after the validity
	verdictContention                // another owner holds too many nodes
	verdictNoQuorum                  // fewer than a quorum of nodes answered
)

// judgeAcquire decides an attempt on n nodes in which granted nodes gave us
// the lock and failed ones did not answer usably (the rest are held by
// another owner), elapsed after its start, for a validity of valid. When
// nodes failed and others are held, the failures win only if the nodes that
// answered are fewer than a quorum: then not even a free lock could have
// been taken.
func judgeAcquire(n, granted, failed int, elapsed, valid time.Duration) acquireVerdict {
	q := quorum(n)
	switch {
	case granted >= q && elapsed < valid:
		return verdictGranted
	case granted >= q:
		return verdictTooSlow
	case n-failed < q:
		return verdictNoQuorum
	}
	return verdictContention
}

// quorumFreeIn is how long until enough nodes could be free for a quorum,
// when need more nodes than are free now must expire and holders are the
// other owner's remaining times on the nodes it holds; 0 when unknown.
func quorumFreeIn(need int, holders []time.Duration) time.Duration {
	if need <= 0 || need > len(holders) {
		return 0
	}
	h := append([]time.Duration(nil), holders...)
	sort.Slice(h, func(i, j int) bool { return h[i] < h[j] })
	return h[need-1]
}

// quorumRemaining is how long a quorum of nodes still hold a key, given the
// key's remaining time on each node that holds it: the q-th longest.
func quorumRemaining(q int, ours []time.Duration) (time.Duration, bool) {
	if q <= 0 || len(ours) < q {
		return 0, false
	}
	h := append([]time.Duration(nil), ours...)
	sort.Slice(h, func(i, j int) bool { return h[i] > h[j] })
	return h[q-1], true
}

// attempt asks every node for the lock for owner, and gives back what it got
// unless a quorum granted it within the validity: validity = px − elapsed −
// drift, elapsed measured on the monotonic clock from before the first
// request.
func (m *RedlockMutex) attempt(ctx context.Context, op, owner string) acquireResult {
	countAttempt(ctx, &m.cfg)
	r := m.r
	px := redlockPX(&m.cfg)
	valid := px - m.drift(px)
	start := time.Now()
	wait := min(redlockNodeTimeout(&m.cfg), valid)
	deadline := start.Add(wait)
	calls := m.nodeCalls(nil, scripts.RedlockAcquire, owner, px.Milliseconds())
	// A free key is taken with a native SET NX PX, the script only when
	// the key exists (goredis.Driver.SetNX): a third less work per node.
	// Not while this process listens for the lock's releases on the node
	// (it waited for the lock within the subscription's linger): the key
	// is likely taken then, and the script answers a taken key in one
	// round trip where the SET would add one.
	setNX := func(ctx context.Context, i int, c *driver.Call) bool {
		return !r.nodes[i].notify.Confirmed(m.key) && r.nodes[i].drv.SetNX(ctx, c, m.key, owner, px)
	}
	replies, tail := r.fanoutFirst(ctx, deadline, calls, r.acquireDecided, setNX)
	elapsed := time.Since(start)

	var t acquireTally
	t.count(replies)
	verdict := judgeAcquire(len(r.nodes), t.granted, t.failed, elapsed, valid)
	hold := &redlockHold{m: m, tail: tail, replies: replies, deadline: deadline}
	if verdict == verdictGranted {
		// Nodes that had not answered when the quorum did are not failures
		// here: their errors are made only for an attempt that failed.
		return acquireResult{hold: hold, start: start, px: px}
	}
	// Not granted: give back our share on every node that may hold it. A
	// request the fan-out stopped waiting for may still reach its node long
	// after: the driver's batching sends pipelines without a deadline (one
	// waits for a node that is down until the node is back), and bytes may
	// be stuck in the network. So the give-back to such a node follows its
	// request's return (giveBack), lest the grant land after it and stay;
	// and while a give-back may still be on its way, the owner value is
	// spent: a Lock that goes on asks as another owner, since a late
	// give-back would delete the next attempt's share after its grant (a
	// lease that holds fewer nodes than it counts, and two holders). A call
	// whose ctx has ended never uses owner again: it returns at once, and
	// the giving back goes on in the background (Close waits for it).
	res := acquireResult{start: start}
	res.spent = !hold.giveBack(ctx, owner, t.release, t.grantedBy)
	if ctx.Err() != nil {
		return res
	}
	failed := r.attemptFailures(ctx, replies, wait)
	m.explainFailure(&res, op, verdict, &t, failed, elapsed, valid)
	return res
}

// acquireDecided reports whether an attempt's replies decide it: a quorum
// granted it (slower nodes finish in the background), or every node that
// answers has answered and they are a quorum: the silent nodes are not
// waited for then (redlock_silent.go).
func (r *Redlock) acquireDecided(replies []nodeReply) bool {
	q := quorum(len(r.nodes))
	granted, answered := 0, 0
	for _, rep := range replies {
		if rep.done {
			answered++
			if ok, _, _, err := readAcquire(rep); err == nil && ok {
				granted++
			}
		}
	}
	if granted >= q {
		return true
	}
	live, _ := r.unanswered(replies)
	return live == 0 && answered >= q
}

// acquireTally counts the replies to one attempt.
type acquireTally struct {
	granted   int
	failed    int // did not answer usably
	permanent int // answered with an error that retrying cannot fix
	holders   []time.Duration
	held      int    // the most nodes one other owner holds
	release   []bool // may hold our share: give it back
	grantedBy []bool
}

// count tallies an attempt's replies.
func (t *acquireTally) count(replies []nodeReply) {
	t.release = make([]bool, len(replies))
	t.grantedBy = make([]bool, len(replies))
	heldBy := make(map[string]int, 1) // nodes per other owner
	for i, rep := range replies {
		ok, pttl, holder, err := readAcquire(rep)
		switch {
		case !rep.done || err != nil:
			t.failed++
			if errs.IsReply(err) {
				// The script raised the error before writing anything.
				if !errs.IsTransient(err) {
					t.permanent++
				}
			} else {
				t.release[i] = true // it may have been granted all the same
			}
		case ok:
			t.granted++
			t.release[i] = true
			t.grantedBy[i] = true
		default:
			t.holders = append(t.holders, pttl)
			heldBy[holder]++
		}
	}
	for holder, nodes := range heldBy {
		if holder != "" { // an older dlock's script names no owner
			t.held = max(t.held, nodes)
		}
	}
}

// attemptFailures describes the nodes of an attempt's replies that did not
// answer usably, within a node timeout of wait.
func (r *Redlock) attemptFailures(ctx context.Context, replies []nodeReply, wait time.Duration) nodeErrors {
	var failed nodeErrors
	for i, rep := range replies {
		_, _, _, err := readAcquire(rep)
		switch {
		case !rep.done && !rep.late: // left early: silent
			failed = append(failed, r.silentError(ctx, i))
		case !rep.done || err != nil:
			failed = append(failed, r.nodeError(ctx, i, rep.done, err, wait))
		}
	}
	return failed
}

// explainFailure sets res's error, and what a waiter needs to know, for an
// attempt that was not granted: verdict, judged on t after elapsed for a
// validity of valid, with the nodes that failed.
func (m *RedlockMutex) explainFailure(res *acquireResult, op string, verdict acquireVerdict, t *acquireTally, failed nodeErrors, elapsed, valid time.Duration) {
	n, q := len(m.r.nodes), quorum(len(m.r.nodes))
	switch verdict {
	case verdictTooSlow:
		res.err = errs.Errorf("dlock: %s %q: %w: a quorum (%d of %d nodes) granted it only after %v, past its validity of %v",
			op, m.name, ErrQuorum, t.granted, n, elapsed.Round(time.Millisecond), valid)
		if len(failed) > 0 {
			res.err = fmt.Errorf("%w; %w", res.err, failed)
		}
	case verdictNoQuorum:
		res.err = errs.Errorf("dlock: %s %q: %w: %d of %d answered, %d needed: %w",
			op, m.name, ErrQuorum, n-len(failed), n, q, failed)
		res.permanent = t.permanent > n-q
	default:
		res.holderTTL = quorumFreeIn(q-t.granted, t.holders)
		res.held = t.held
		res.err = &errs.NotObtainedError{Name: m.name, HolderTTL: res.holderTTL, Last: failed.orNil()}
	}
}

// readAcquire reads one node's reply to an attempt: rep.err, or what
// parseAcquire makes of a reply; nothing for a node that did not answer.
func readAcquire(rep nodeReply) (granted bool, holderTTL time.Duration, holder string, err error) {
	if !rep.done {
		return false, 0, "", nil
	}
	if rep.err != nil {
		return false, 0, "", rep.err
	}
	return parseAcquire(rep.reply)
}

// parseAcquire reads redlock_acquire's reply: granted, or the other owner's
// remaining time and value (empty from an older dlock's script, which did
// not send it).
func parseAcquire(reply any) (granted bool, holderTTL time.Duration, holder string, err error) {
	if reply == int64(1) {
		return true, 0, "", nil
	}
	items, ok := reply.([]any)
	if !ok || len(items) == 0 {
		return false, 0, "", errs.Unexpected(reply)
	}
	switch code, _ := items[0].(int64); code {
	case 0:
		if v, err := replyInts(reply, 2); err == nil {
			if len(items) > 2 {
				holder, _ = items[2].(string)
			}
			return false, ms(v[1]), holder, nil
		}
	}
	return false, 0, "", errs.Unexpected(reply)
}

// redlockHold is the holder of one Redlock lease: its renewals, release and
// TTL go to every node.
type redlockHold struct {
	m *RedlockMutex
	// replies are the acquisition's, as its fan-out returned them, and tail
	// its requests still running then: a node not done may still be
	// granting (split). None runs past deadline unless the node's client
	// ignores deadlines or the driver's batching sent it in a pipeline,
	// which has none (see attempt).
	replies  []nodeReply
	tail     fanoutTail
	deadline time.Time
	handoffs int // local hand-offs in a row that led to it (redlock_handoff.go)
}

var (
	_ holder   = (*redlockHold)(nil)
	_ unlocker = (*redlockHold)(nil)
	_ drifter  = (*redlockHold)(nil)
)

func (h *redlockHold) lockName() string { return h.m.name }

func (h *redlockHold) kind() Kind { return KindMutex }

func (h *redlockHold) drift(px time.Duration) time.Duration { return h.m.drift(px) }

// renew re-arms the key for px on every node. It succeeds only when a quorum
// renewed it within the validity this renewal gives (px − drift from its
// start); it returns ErrNotHeld once so many nodes no longer hold our key
// that no quorum is left.
func (h *redlockHold) renew(ctx context.Context, owner string, px time.Duration, shorten bool) error {
	m := h.m
	n, q := len(m.r.nodes), quorum(len(m.r.nodes))
	start := time.Now()
	valid := px - m.drift(px)
	wait := redlockNodeTimeout(&m.cfg)
	if valid > 0 && valid < wait {
		wait = valid
	}
	calls := m.nodeCalls(nil, scripts.OwnedExtend, extendArgs(shorten, owner, px.Milliseconds())...)
	count := func(replies []nodeReply) (renewed, gone int) {
		for _, rep := range replies {
			if rep.done && rep.err == nil {
				switch v, _ := rep.reply.(int64); v {
				case 1:
					renewed++
				case 0:
					gone++
				}
			}
		}
		return renewed, gone
	}
	replies, _ := m.r.fanout(ctx, start.Add(wait), calls, func(replies []nodeReply) bool {
		renewed, gone := count(replies)
		return renewed >= q || gone > n-q
	})
	elapsed := time.Since(start)
	renewed, gone := count(replies)
	switch {
	case renewed >= q && elapsed < valid:
		return nil
	case renewed >= q:
		return fmt.Errorf("%w: a quorum (%d of %d nodes) renewed it only after %v, past the validity of %v",
			ErrQuorum, renewed, n, elapsed.Round(time.Millisecond), valid)
	case gone > n-q:
		return fmt.Errorf("%w: %d of %d nodes no longer hold it", ErrNotHeld, gone, n)
	}
	var failed nodeErrors
	for i, rep := range replies {
		err := rep.err
		if rep.done && err == nil {
			if v, ok := rep.reply.(int64); ok && (v == 0 || v == 1) {
				continue
			}
			err = errs.Unexpected(rep.reply)
		}
		failed = append(failed, m.r.nodeError(ctx, i, rep.done, err, wait))
	}
	return fmt.Errorf("%w: renewed on %d of %d nodes, %d needed: %w", ErrQuorum, renewed, n, q, failed)
}

// remaining is how long a quorum of the nodes still hold our key: the
// quorum-th longest of the remaining times on the nodes that hold it.
func (h *redlockHold) remaining(ctx context.Context, owner string) (time.Duration, error) {
	m := h.m
	n, q := len(m.r.nodes), quorum(len(m.r.nodes))
	calls := m.nodeCalls(nil, scripts.OwnedPTTL, owner)
	wait := redlockNodeTimeout(&m.cfg)
	replies, _ := m.r.fanout(ctx, time.Now().Add(wait), calls, nil)
	var (
		ours   []time.Duration
		gone   int
		failed nodeErrors
	)
	for i, rep := range replies {
		err := rep.err
		if rep.done && err == nil {
			v, ok := rep.reply.(int64)
			switch {
			case !ok:
				err = errs.Unexpected(rep.reply)
			case v == -3:
				gone++
				continue
			case v < 0:
				err = fmt.Errorf("%w: the key has no expiry", ErrKeyConflict)
			default:
				ours = append(ours, ms(v))
				continue
			}
		}
		failed = append(failed, m.r.nodeError(ctx, i, rep.done, err, wait))
	}
	if d, ok := quorumRemaining(q, ours); ok {
		return d, nil
	}
	if gone > n-q {
		return 0, fmt.Errorf("%w: %d of %d nodes no longer hold it", ErrNotHeld, gone, n)
	}
	return 0, fmt.Errorf("%w: %d of %d nodes hold it, %d needed: %w", ErrQuorum, len(ours), n, q, failed)
}
