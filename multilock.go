package dlock

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/keyslot"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/protocol"
)

// MultiLock holds several mutexes as one: all of them or none. Its names are
// the same locks as the Mutexes of those names, so a MultiLock and a Mutex
// exclude each other. Get one from Client.MultiLock; it is an immutable
// descriptor, safe for concurrent use.
//
// Lock waits for the locks in one canonical order (sorted by name), so two
// MultiLocks never deadlock, whatever order their names were given in; should
// a lock it keeps be lost while it waits for the others, it gives them all
// back and starts over. Its one Lease is lost when any of its locks is lost,
// and then gives the others back by itself; Unlock releases them all. Its
// Token is the highest of its locks' fencing tokens; TokenOf gives each.
// See docs/primitives.md, "MultiLock".
type MultiLock struct {
	c     *Client
	names []string // sorted
	label string   // names joined by commas, for errors and observations
	cfg   config
	err   error
	locks []*Mutex // by sorted name
}

// MultiLock returns the lock that holds every one of names at once, with the
// Client's default options (see With). It sends nothing and never fails: no
// names, a repeated name, or an invalid one is reported as
// ErrInvalidArgument by the first TryLock or Lock.
func (c *Client) MultiLock(names ...string) *MultiLock {
	return c.multiLock(names, nil)
}

// With returns a copy of m with opts applied over the Client's defaults.
func (m *MultiLock) With(opts ...Option) *MultiLock {
	return m.c.multiLock(m.names, opts)
}

// multiLockOfTwo is a MultiLock of up to two names with its names and
// locks: one allocation.
type multiLockOfTwo struct {
	m     MultiLock
	names [2]string
	mus   [2]Mutex
	locks [2]*Mutex
}

func (c *Client) multiLock(names []string, opts []Option) *MultiLock {
	n := len(names)
	var (
		m   *MultiLock
		mus []Mutex
	)
	if n <= 2 {
		two := &multiLockOfTwo{}
		m, mus = &two.m, two.mus[:n]
		m.names, m.locks = two.names[:n], two.locks[:n]
	} else {
		m, mus = &MultiLock{names: make([]string, n), locks: make([]*Mutex, n)}, make([]Mutex, n)
	}
	m.c = c
	copy(m.names, names)
	sort.Strings(m.names)
	m.label = strings.Join(m.names, ",")
	sorted, label := m.names, m.label
	err := c.applyOptions(&m.cfg, "MultiLock", label, opts)
	switch {
	case len(sorted) == 0:
		err = errs.Errorf("dlock: MultiLock: %w", errs.InvalidArgf("no names"))
	case err == nil:
		for i, name := range sorted {
			if err = checkName(name); err != nil {
				err = errs.Errorf("dlock: MultiLock: %w", err)
				break
			}
			if i > 0 && sorted[i-1] == name {
				err = errs.Errorf("dlock: MultiLock: %w", errs.InvalidArgf("name %q given twice", name))
				break
			}
		}
	}
	m.err = err
	if err == nil {
		// The set reports to the Observer as one lock; its locks' own
		// leases do not.
		partCfg := m.cfg
		partCfg.observer = nil
		for i, name := range sorted {
			mus[i] = Mutex{c: c, name: name, cfg: partCfg, keys: newLockKeys(m.cfg.keyPrefix, name)}
			m.locks[i] = &mus[i]
		}
		// Its locks' own leases keep the minimum hold, each as it is
		// unlocked; the set's lease releases through them.
		m.cfg.minHold = 0
	}
	return m
}

// Names returns the lock's names in canonical (sorted) order.
func (m *MultiLock) Names() []string { return append([]string(nil), m.names...) }

// TryLock makes one attempt to take every lock, at once. It returns an error
// matching ErrNotObtained if any is held by another owner or has waiters
// queued, or if one it took was lost before the lease could be returned
// (this process stalled past the locks' validity; the error also matches
// ErrLockLost then); nothing is held then.
func (m *MultiLock) TryLock(ctx context.Context) (*Lease, error) { return m.lock(ctx, false) }

// Lock takes every lock, waiting as long as ctx allows. Failures to reach
// Redis are retried meanwhile, as Mutex.Lock does. When ctx ends first, the
// error matches ErrNotObtained and ctx's error, and every lock taken
// meanwhile is released. A lock lost while Lock waits for the others is
// taken again before Lock returns (see MultiLock). The caller must Unlock
// the returned Lease.
func (m *MultiLock) Lock(ctx context.Context) (*Lease, error) {
	ctx, cancel := m.cfg.boundWait(ctx)
	defer cancel()
	return m.lock(ctx, true)
}

func (m *MultiLock) lock(ctx context.Context, wait bool) (*Lease, error) {
	if m.err != nil {
		return nil, m.err
	}
	if m.cfg.observer != nil {
		return observeAcquire(ctx, &m.cfg, KindMutex, m.label, acquireOp(wait), func(ctx context.Context) (*Lease, error) {
			return m.lockUnobserved(ctx, wait)
		})
	}
	return m.lockUnobserved(ctx, wait)
}

func (m *MultiLock) lockUnobserved(ctx context.Context, wait bool) (*Lease, error) {
	if err := m.c.checkOpen("MultiLock", m.label); err != nil {
		return nil, err
	}
	owner, err := ownerid.New(m.cfg.ownerInfo)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	h, unreachable, err := m.takeAtOnce(ctx, owner)
	fresh := unreachable
	switch {
	case err == nil:
		l, lost := m.combineValid(ctx, h, true)
		if lost == nil {
			return l, nil
		}
		// A lock was lost before the lease was made (this process stalled
		// past its validity, or it was force-released), and the others
		// were given back. TryLock reports it; Lock waits for them all,
		// as a fresh owner, rather than return a lost lease.
		if !wait {
			return nil, errs.Errorf("dlock: TryLock %q: %w: a lock it took was lost before the lease could be returned "+
				"(this process stalled past the lock's validity, or the lock was force-released); the others were given back: %w",
				m.label, ErrNotObtained, lost)
		}
		fresh = true
	case !wait:
		return nil, err
	case !errors.Is(err, ErrNotObtained) && !unreachable && ctx.Err() == nil:
		return nil, err
	}
	// Taken by someone, or Redis not reached (the waits retry that while
	// ctx allows, and report ctx's end as every Lock does): wait for each
	// lock in turn, in canonical order.
	first := err
	for {
		if fresh {
			// The failed call may have run (or a lock held before was
			// lost): its clean-up, in the background, releases whatever
			// owner holds, so the waits must not take the locks as that
			// owner.
			if err := m.c.checkOpen("MultiLock", m.label); err != nil {
				return nil, err
			}
			if owner, err = ownerid.New(m.cfg.ownerInfo); err != nil {
				return nil, err
			}
		}
		fresh = true
		parts, err := m.waitEach(ctx, owner)
		if err == nil {
			l, lost := m.combineValid(ctx, &multiHolder{m: m, parts: parts}, false)
			if lost == nil {
				return l, nil
			}
			// Lost between the last wait and the lease, and the other
			// locks given back: wait for them all again.
			err = errPartLost
		}
		if errors.Is(err, errPartLost) {
			m.cfg.logger.Debug("dlock: a lock the MultiLock had taken was lost while it waited for the others; waiting for them all again",
				slog.String("lock", m.label))
			continue
		}
		// The wait, as the caller sees it, began with the first attempt,
		// and that attempt's failure to reach Redis is the last one known
		// when no later attempt saw another.
		var nerr *errs.NotObtainedError
		if errors.As(err, &nerr) {
			nerr.Waited = time.Since(began)
			if nerr.Last == nil && unreachable {
				nerr.Last = first
			}
		}
		return nil, err
	}
}

// errPartLost ends a wait of waitEach whose locks taken so far are no longer
// all held: one was lost (expired, or taken over) meanwhile.
var errPartLost = errors.New("dlock: a lock the MultiLock had taken was lost while it waited for the others")

// waitEach waits for each lock in turn, in canonical order, as owner,
// keeping those it has. A lock it has taken may be lost meanwhile (force
// released, or past its validity while Redis could not be reached): its
// loss stops the wait at once, and waitEach releases the others and returns
// errPartLost, so that Lock never returns a lease that does not hold every
// lock; the caller waits again as a fresh owner, from the first lock, which
// keeps the canonical order that makes MultiLocks deadlock-free. On any
// error, nothing is held.
func (m *MultiLock) waitEach(ctx context.Context, owner string) ([]*Lease, error) {
	// Each call has its own wctx: a loss callback left on a lock of an
	// earlier call (released, or lost) must not stop a later one's wait.
	wctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	parts := make([]*Lease, 0, len(m.locks))
	for _, mu := range m.locks {
		l, err := m.c.acquireAs(wctx, mu, &mu.cfg, true, owner)
		if err == nil {
			parts = append(parts, l)
			l.onLoss(func(error) { stop(errPartLost) })
		}
		// A loss wins over whatever the wait returned: ctx's end, if it
		// came too, is reported by the caller's next wait.
		if errors.Is(context.Cause(wctx), errPartLost) {
			err = errPartLost
		}
		if err != nil {
			m.releaseAll(ctx, parts, nil)
			return nil, err
		}
	}
	return parts, nil
}

// takeAtOnce takes every lock with one script per hash slot, in order,
// releasing what it took if a slot fails, and returns the holder of the
// locks' leases. unreachable reports a failure to reach Redis that a wait
// would retry.
func (m *MultiLock) takeAtOnce(ctx context.Context, owner string) (h *multiHolder, unreachable bool, err error) {
	var buf [4]int64 // a few locks' tokens need no allocation
	m.forSlotGroups(func(group []*Mutex) bool {
		fences := buf[:]
		if len(group) > len(buf) {
			fences = make([]int64, len(group))
		}
		var start time.Time
		start, unreachable, err = m.takeGroup(ctx, owner, group, fences)
		if err != nil {
			return false
		}
		if h == nil {
			h = m.newHolder()
		}
		for i, mu := range group {
			l := &h.leases[len(h.parts)]
			if err = l.start(ctx, m.c.wd, mu, &mu.cfg, owner, fences[i], start, m.cfg.initialPX()); err != nil {
				// start gave its own lock back; the group's later locks,
				// taken by the same script, have no lease to do it.
				m.releaseGroup(ctx, group[i+1:], owner)
				return false
			}
			h.parts = append(h.parts, l)
		}
		return true
	})
	if err != nil {
		if h != nil {
			m.releaseAll(ctx, h.parts, nil)
		}
		return nil, unreachable, err
	}
	return h, false, nil
}

// takeGroup takes the locks of group, of one hash slot, with one script
// sent at start, and writes their tokens to fences, which has a place for
// each; nothing of group is held when it fails.
func (m *MultiLock) takeGroup(ctx context.Context, owner string, group []*Mutex, fences []int64) (start time.Time, unreachable bool, err error) {
	start = time.Now()
	var buf [4][4]string // the keys of a few locks need no allocation
	locks := buf[:0]
	for _, mu := range group {
		locks = append(locks, mu.keys.array())
	}
	countAttempt(ctx, &m.cfg)
	t, err := protocol.MultiAcquire(ctx, m.c.drv, locks, owner,
		m.cfg.initialPX(), fenceRetention(m.cfg.ttl), m.cfg.ack(), fences)
	switch {
	case t.Failed != nil:
		err = errs.Redis("MultiLock", m.label, err)
	case err == nil && t.Busy > 0:
		e := &errs.NotObtainedError{Name: group[t.Busy-1].name, HolderTTL: t.HolderTTL}
		if t.HolderTTL == 0 {
			e.QueuedAhead = "it is free, but " + errs.OthersFirst
		}
		err = e
	case err == nil:
		if err = m.cfg.tooFewAcked(t.Acked); err != nil {
			// Taken, but too few replicas have it: give it back.
			m.releaseGroup(ctx, group, owner)
			err = errs.Redis("MultiLock", m.label, err)
		}
	}
	if err != nil {
		if t.Failed != nil {
			// The script may have run: release its locks too.
			for _, mu := range group {
				m.c.abandon(ctx, mu, &m.cfg, owner, t.Failed, nil)
			}
		}
		return start, t.Failed != nil && errs.IsTransient(t.Failed), err
	}
	return start, false, nil
}

// forSlotGroups calls f with the locks of each Cluster hash slot, in
// canonical order within and between groups, until f returns false; with
// all the locks at once when the deployment is not sharded.
func (m *MultiLock) forSlotGroups(f func(group []*Mutex) bool) {
	if s, ok := m.c.drv.(driver.Sharded); !ok || !s.Sharded() {
		f(m.locks)
		return
	}
	for _, group := range groupBy(m.locks, func(mu *Mutex) int { return keyslot.Of(mu.keys.lock) }) {
		if !f(group) {
			return
		}
	}
}

// groupBy splits items into groups of equal key, in the order each key
// first appears, each group in items' order.
func groupBy[T any, K comparable](items []T, key func(T) K) [][]T {
	var groups [][]T
	index := map[K]int{}
	for _, it := range items {
		k := key(it)
		g, ok := index[k]
		if !ok {
			g = len(groups)
			index[k] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], it)
	}
	return groups
}

// releaseGroup releases owner's locks of group, which one script took and
// no lease holds (too few replicas acknowledged them, or a lease could not
// start); detached from ctx.
func (m *MultiLock) releaseGroup(ctx context.Context, group []*Mutex, owner string) {
	rctx, cancel := detach(ctx, m.cfg.releaseTimeout)
	defer cancel()
	for _, mu := range group {
		if err := mu.release(rctx, owner); err != nil && !errors.Is(err, ErrNotHeld) {
			m.cfg.logger.Warn("dlock: releasing a lock the MultiLock took but could not keep failed; it expires by its TTL",
				slog.String("lock", mu.name), slog.Any("error", err))
		}
	}
}
