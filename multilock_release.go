package dlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/keyslot"
	"github.com/dlock-go/dlock/internal/protocol"
)

// releaseAll ends parts, leases of m's locks, as each one's Unlock would
// (Lease.end), detached from ctx, and returns their errors joined. The
// locks that nobody waits for are released together, with one
// multi_release.lua call per owner and hash slot; the others go through
// their Mutex's own release (Mutex.unlock: a local hand-off, or
// mutex_release.lua, which hands the lock over in Redis or reports it not
// held), so the Mutex's release logic stays in one place.
// scratch, when not nil, holds the bookkeeping for a few parts, so that
// the common release allocates none; only one releaseAll may use it at a
// time.
func (m *MultiLock) releaseAll(ctx context.Context, parts []*Lease, scratch *releaseScratch) error {
	rctx, cancel := detach(ctx, m.cfg.releaseTimeout)
	defer cancel()
	return m.releaseDetached(ctx, rctx, parts, scratch)
}

// releaseDetached is releaseAll within rctx, detached from ctx's
// cancellation already (a holder's release gets one from Lease.end).
func (m *MultiLock) releaseDetached(ctx, rctx context.Context, parts []*Lease, scratch *releaseScratch) error {
	var (
		u     partUnlock
		batch []int // parts to release with multi_release.lua
		keys  []string
	)
	if n := len(parts); scratch != nil && n <= len(scratch.u) {
		u, batch, keys = scratch.u[:n], scratch.batch[:0:n], scratch.keys[:0:2*n]
	} else {
		u, batch = make(partUnlock, n), make([]int, 0, n)
	}
	for i, p := range parts {
		if err := p.beginEnd(ctx, rctx, unlockOp); err != nil {
			u[i].err = err
			continue
		}
		u[i].sent = time.Now()
		mu, isMutex := p.h.(*Mutex)
		switch {
		case p.minHoldLeft() > 0:
			// WithMinHold: the key stays, unrenewed, until the hold's end.
			u.finish(ctx, p, i, p.h.Renew(rctx, p.s.Owner(), p.minHoldLeft(), true))
		case !isMutex: // not a lock of m's: released as its own Unlock would
			if un, ok := p.h.(unlocker); ok {
				u.finish(ctx, p, i, un.unlock(rctx, p.s.Owner()))
			} else {
				u.finish(ctx, p, i, p.h.release(rctx, p.s.Owner()))
			}
		default:
			if done, err := m.c.handOff(rctx, mu, p.s.Owner()); done {
				u.finish(ctx, p, i, err) // to a waiter of this Client
				continue
			}
			batch = append(batch, i)
		}
	}
	if groups := m.releaseGroups(parts, batch); len(groups) > 1 {
		forEach(len(groups), func(g int) { m.releaseTogether(ctx, rctx, parts, groups[g], u, nil) })
	} else if len(batch) > 0 {
		m.releaseTogether(ctx, rctx, parts, batch, u, keys)
	}
	return u.err()
}

// unlockOp and unlockLost are what Lease.Unlock passes to Lease.end.
const (
	unlockOp   = "Unlock"
	unlockLost = "it expired or was taken over before Unlock"
)

// partUnlock collects the outcome of releaseAll per part.
type partUnlock []partResult

// partResult is a part's outcome: the error its Unlock returns, and when
// its release was sent.
type partResult struct {
	err  error
	sent time.Time
}

// releaseScratch is releaseAll's bookkeeping for up to two parts, kept in
// a MultiLock's holder for its first release.
type releaseScratch struct {
	u     [2]partResult
	batch [2]int
	keys  [4]string
}

// finish ends part i by err, the answer of its release (Lease.finishEnd).
// Calls for different parts may run concurrently.
func (u partUnlock) finish(ctx context.Context, p *Lease, i int, err error) {
	u[i].err = p.finishEnd(ctx, unlockOp, unlockLost, u[i].sent, err)
}

// err is the parts' errors joined.
func (u partUnlock) err() error {
	var list []error
	for _, r := range u {
		if r.err != nil {
			list = append(list, r.err)
		}
	}
	return errs.Join(list...)
}

// releaseTogether releases group, indexes of parts that share an owner
// and a hash slot, with one multi_release.lua call, then each lock it left
// (waiters queued, or not the owner's) through its Mutex's release. A
// failed call fails every part of the group: it may have released any of
// them, so each lease ends lost and Unlock may be called again. keys, when
// its capacity is enough, is where the call's keys are laid out.
func (m *MultiLock) releaseTogether(ctx, rctx context.Context, parts []*Lease, group []int, u partUnlock, keys []string) {
	owner := parts[group[0]].s.Owner()
	n := len(group)
	if cap(keys) >= 2*n {
		keys = keys[:2*n]
	} else {
		keys = make([]string, 2*n)
	}
	for j, i := range group {
		mu := parts[i].h.(*Mutex)
		keys[j], keys[n+j] = mu.keys.lock, mu.keys.queue
	}
	sent := time.Now()
	for _, i := range group {
		u[i].sent = sent
	}
	left, resent, err := protocol.MultiRelease(rctx, m.c.drv, keys, owner)
	if err != nil {
		for _, i := range group {
			u.finish(ctx, parts[i], i, err)
		}
		return
	}
	next := 0 // left is in ascending order
	for j, i := range group {
		if next < len(left) && left[next] == j {
			next++
			continue
		}
		u.finish(ctx, parts[i], i, nil)
	}
	if len(left) == 0 {
		return
	}
	forEach(len(left), func(k int) {
		i := group[left[k]]
		if !resent {
			u[i].sent = time.Now() // else the multi release's own sending may be the release
		}
		err := parts[i].h.(*Mutex).release(rctx, owner)
		if resent && errors.Is(err, ErrNotHeld) {
			// The first sending of the multi release may have released it.
			err = errResentRelease
		}
		u.finish(ctx, parts[i], i, err)
	})
}

// releaseGroups splits batch, indexes of parts whose holders are m's
// Mutexes, into the groups one multi_release.lua call can release: one
// owner, and on a Cluster one hash slot. Groups keep batch's order. It
// returns nil when batch is one group (or empty): the common case, which
// needs neither the map nor the groups.
func (m *MultiLock) releaseGroups(parts []*Lease, batch []int) [][]int {
	if len(batch) == 0 {
		return nil
	}
	s, sharded := m.c.drv.(driver.Sharded)
	sharded = sharded && s.Sharded()
	if !sharded && sameOwner(parts, batch) {
		return nil
	}
	type groupKey struct {
		owner string
		slot  int
	}
	return groupBy(batch, func(i int) groupKey {
		k := groupKey{owner: parts[i].s.Owner()}
		if sharded {
			k.slot = keyslot.Of(parts[i].h.(*Mutex).keys.lock)
		}
		return k
	})
}

// sameOwner reports whether the parts at batch share one owner.
func sameOwner(parts []*Lease, batch []int) bool {
	for _, i := range batch[1:] {
		if parts[i].s.Owner() != parts[batch[0]].s.Owner() {
			return false
		}
	}
	return true
}

// forEach runs f(0) ... f(n-1) concurrently and waits for them; a single
// call runs in the caller.
func forEach(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			f(i)
		}(i)
	}
	wg.Wait()
}
