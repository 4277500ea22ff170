package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/hold"
)

// combineValid is combine for the leases of h just granted: unless one of
// them is already lost or past its validity (this process stalled after the
// grants, or a lock was force-released meanwhile). Then it gives the others
// back, waiting for that within ctx, and returns why instead of a lease.
// oneSend says the leases come from takeAtOnce: the first of them has the
// earliest validity deadline (its slot's script was sent first, and every
// lock asked the same px), so it is the only one to read; a loss of any is
// seen through combine.
func (m *MultiLock) combineValid(ctx context.Context, h *multiHolder, oneSend bool) (*Lease, error) {
	now := time.Now()
	parts := h.parts
	if oneSend {
		parts = parts[:1]
	}
	for _, p := range parts {
		if !p.s.ValidAt(now) {
			// The watchdog may not have declared it lost yet.
			lost := p.s.Lost()
			if lost == nil {
				lost = fmt.Errorf("%w: lock %q was past its validity before the lease was made", ErrLockLost, p.Name())
			}
			_ = m.releaseAll(ctx, h.parts, nil) // ErrNotHeld for the lost one
			return nil, lost
		}
	}
	l := m.combine(h)
	if h.partLost.Load() {
		if lost := l.s.Lost(); lost != nil {
			h.awaitReleaseRest(ctx)
			return nil, lost
		}
	}
	return l, nil
}

// newHolder returns the holder for a take of m's locks, with room for
// their leases: for a few locks, in the holder itself.
func (m *MultiLock) newHolder() *multiHolder {
	h := &multiHolder{m: m}
	if n := len(m.locks); n <= len(h.ownLeases) {
		h.leases, h.parts = h.ownLeases[:n], h.ownParts[:0:n]
	} else {
		h.leases, h.parts = make([]Lease, n), make([]*Lease, 0, n)
	}
	return h
}

// combine makes the one Lease of the set from h, the holder of its locks'
// leases. The Lease is lost at once if one of them already was.
func (m *MultiLock) combine(h *multiHolder) *Lease {
	var token int64
	for _, p := range h.parts {
		if p.token > token {
			token = p.token
		}
	}
	l := &h.lease
	*l = Lease{h: h, cfg: &m.cfg, token: token, grantedAt: time.Now()}
	l.s.Init(m.c.wd, (*leaseHost)(l), h.parts[0].s.Owner(), hold.Settings{TTL: m.cfg.ttl}, nil)
	// One callback for every lock: it finds which one was lost.
	lost := func(err error) { h.lostPart(err) }
	for _, p := range h.parts {
		p.s.OnLoss(lost)
	}
	return l
}

// lostPart is the loss callback of every lock of h: err is one lock's
// loss, and the set's Lease is lost with it.
func (h *multiHolder) lostPart(err error) {
	h.partLost.Store(true)
	l := &h.lease
	if l.s.Unlocking() {
		// The holder's Unlock is releasing every lock, and tells how that
		// went: a lock whose release failed is lost, and so is the lease
		// then. Releasing the others from here too raced that Unlock,
		// whose own release of them then answered ErrNotHeld, and it
		// reported the whole lease taken over instead of the failure.
		return
	}
	// A callback runs after its lease's loss: the first lock found lost is
	// named, with its own error.
	lost := h.parts[0]
	for _, p := range h.parts {
		if e := p.s.Lost(); e != nil {
			lost, err = p, e
			break
		}
	}
	// The release first: a holder woken by the loss may Unlock at once,
	// and must find the release begun, to wait for it.
	h.releaseRest(lost)
	l.s.Lose(fmt.Sprintf("lock %q was lost: %v", lost.Name(), err))
}

// releaseRest releases, in the background, the locks of a MultiLock lease
// other than lost, which was lost: the lease is lost as a whole, and its
// other locks, still renewed by the watchdog, would otherwise stay held for
// as long as the Client lives, should the holder never call Unlock. Not when
// the loss is the Client's Close, which releases nothing (the holder may
// still be working; its keys expire by their TTL). Only the first loss
// releases: the others find their locks released already. The lease's
// Unlock waits for it (release).
func (h *multiHolder) releaseRest(lost *Lease) {
	m := h.m
	select {
	case <-m.c.closed:
		return
	default:
	}
	h.mu.Lock()
	if h.releasing != nil {
		h.mu.Unlock()
		return
	}
	done := make(chan struct{})
	h.releasing = done
	h.mu.Unlock()
	left := new(atomic.Int32)
	left.Store(int32(len(h.parts) - 1))
	if left.Load() == 0 {
		close(done)
		return
	}
	for _, q := range h.parts {
		if q == lost {
			continue
		}
		q := q
		m.c.cleanups.Go(func() {
			defer func() {
				if left.Add(-1) == 0 {
					close(done)
				}
			}()
			select {
			case <-m.c.closed:
				// Close came meanwhile (and this runs in the caller once
				// Close has closed the pool): release nothing.
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), m.cfg.releaseTimeout)
			defer cancel()
			// ErrNotHeld: lost too, or the holder's own Unlock came first.
			if err := q.Unlock(ctx); err != nil && !errors.Is(err, ErrNotHeld) {
				m.cfg.logger.Warn("dlock: could not release a lock of a MultiLock that lost another; it expires by its TTL",
					slog.String("lock", q.Name()), slog.Any("error", err))
			}
		})
	}
}

// TokenOf returns the fencing token the lease holds for the lock called
// name: for a MultiLock lease, that lock's own token; for any other lease,
// its Token when name is its Name. ok is false when the lease holds no lock
// of that name.
func (l *Lease) TokenOf(name string) (token int64, ok bool) {
	if h, isMulti := l.h.(*multiHolder); isMulti {
		for _, p := range h.parts {
			if p.Name() == name {
				return p.token, true
			}
		}
		return 0, false
	}
	if name == l.Name() {
		return l.token, true
	}
	return 0, false
}

// multiHolder is a MultiLock lease's holder: its locks' own leases, which
// the watchdog renews (in one batch, since they are due together).
type multiHolder struct {
	m     *MultiLock
	parts []*Lease

	mu sync.Mutex
	// releasing, once a lock was lost, is closed when releaseRest has
	// released the others.
	releasing chan struct{}
	// unlocked says an Unlock of the set has released, or tried to
	// release, its locks.
	unlocked bool

	// partLost says a lock's loss callback ran (lostPart).
	partLost atomic.Bool

	// lease is the set's Lease (combine): made with its holder, both cost
	// one allocation. So are, for a few locks, the locks' leases and the
	// first release's bookkeeping (newHolder, release).
	lease     Lease
	leases    []Lease // backs parts, for a take (newHolder)
	ownLeases [2]Lease
	ownParts  [2]*Lease
	scratch   releaseScratch
}

func (h *multiHolder) lockName() string { return h.m.label }

func (h *multiHolder) kind() Kind { return KindMutex }

// renew extends every lock; ErrNotHeld if any of them is no longer held.
// Each lock's own lease decides whether its Extend shortens it.
func (h *multiHolder) Renew(ctx context.Context, _ string, px time.Duration, _ bool) error {
	list := make([]error, len(h.parts))
	var wg sync.WaitGroup
	for i, p := range h.parts {
		wg.Add(1)
		go func(i int, p *Lease) {
			defer wg.Done()
			list[i] = p.Extend(ctx, px)
		}(i, p)
	}
	wg.Wait()
	for _, err := range list {
		if errors.Is(err, ErrNotHeld) {
			return ErrNotHeld
		}
	}
	return errs.Join(list...)
}

// release unlocks every lock; ErrNotHeld if any was no longer held (the
// others are released all the same). After a loss it first waits, within
// ctx, for the background release of the other locks (releaseRest), so
// that they are free when Unlock returns.
func (h *multiHolder) release(ctx context.Context, _ string) error {
	h.awaitReleaseRest(ctx)
	// Locks an earlier Unlock released are done with: a retried Unlock,
	// after one whose release failed for some locks, releases the others
	// and does not report the released ones as not held. Only an earlier
	// Unlock, or releaseRest after a loss, releases a lock: before either,
	// the leases need not be asked (each asks the Client-wide mutex).
	h.mu.Lock()
	first := !h.unlocked && h.releasing == nil
	h.unlocked = true
	h.mu.Unlock()
	// A lock whose Unlock failed (its release, or the wait for its
	// renewal in flight) ends lost and unrenewed: Lease.end.
	var err error
	if first {
		// ctx is Lease.end's, detached already, and nothing waited on it.
		err = h.m.releaseDetached(ctx, ctx, h.parts, &h.scratch)
	} else {
		rest := make([]*Lease, 0, len(h.parts))
		for _, p := range h.parts {
			if !p.s.ReleasedByUnlock() {
				rest = append(rest, p)
			}
		}
		err = h.m.releaseAll(ctx, rest, nil)
	}
	if errors.Is(err, ErrNotHeld) {
		return ErrNotHeld
	}
	return err
}

// awaitReleaseRest waits, within ctx, for the release of the other locks
// after a loss (releaseRest), if one began.
func (h *multiHolder) awaitReleaseRest(ctx context.Context) {
	h.mu.Lock()
	releasing := h.releasing
	h.mu.Unlock()
	if releasing != nil {
		select {
		case <-releasing:
		case <-ctx.Done():
		}
	}
}

// remaining is the shortest remaining time among the locks.
func (h *multiHolder) Remaining(ctx context.Context, _ string) (time.Duration, error) {
	var least time.Duration = -1
	for _, p := range h.parts {
		d, err := p.TTL(ctx)
		if errors.Is(err, ErrNotHeld) {
			return 0, ErrNotHeld
		}
		if err != nil {
			return 0, err
		}
		if least < 0 || d < least {
			least = d
		}
	}
	return least, nil
}
