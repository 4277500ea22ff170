package dlock

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/dlock-go/dlock/internal/errs"
)

// ForceUnlock releases everything held under name, for operators: the holder
// of its Mutex (FairMutex, MultiLock), ReentrantMutex, RWMutex and Semaphore;
// Latches hold nothing and are left alone. Each release is the primitive's
// own, run on the holder's behalf, so the lock passes to its waiters as on a
// normal release, and a holder that changed since ForceUnlock read the name
// is left alone. It returns how many holders it released. A former holder
// learns of it at its next renewal, when its Done closes with ErrLockLost;
// until then it may keep working unprotected, which fencing tokens guard
// against.
//
// It returns ErrInvalidArgument for an invalid name, ErrKeyConflict,
// ErrClosed, or the failure to reach Redis (with the count of holders released
// by then). It is safe for concurrent use.
func (c *Client) ForceUnlock(ctx context.Context, name string) (released int, err error) {
	st, err := c.inspect(ctx, "ForceUnlock", name)
	if err != nil {
		return 0, err
	}
	return c.forceRelease(ctx, st)
}

// ForceUnlockOwner is ForceUnlock restricted to one holder: it releases what
// owner holds under name and leaves every other holder alone. owner is a
// Holder.Owner as Inspect reports it (a Lease's or Permits' Owner), or the
// whole "<Owner>;<Info>" value of the lock's key, which must then match both;
// for a ReentrantMutex owner, every hold is released. It returns how many
// holders it released, 0 when owner holds nothing under name. It also lets
// one process release a lock another took (docs/guide.md, "Inspecting and
// force-releasing locks"). Redlock leases cannot be released through a
// Client.
//
// It returns ErrInvalidArgument for an invalid name or an empty owner, and
// otherwise the errors of ForceUnlock. It is safe for concurrent use.
func (c *Client) ForceUnlockOwner(ctx context.Context, name, owner string) (released int, err error) {
	if owner == "" {
		return 0, errs.Errorf("dlock: ForceUnlockOwner %q: %w", name, errs.InvalidArgf("empty owner"))
	}
	st, err := c.inspect(ctx, "ForceUnlockOwner", name)
	if err != nil {
		return 0, err
	}
	id, info, whole := strings.Cut(owner, ";")
	st.held = slices.DeleteFunc(st.held, func(h heldBy) bool {
		return (h.owner != id || whole && h.info != info) && (!whole || h.value != owner)
	})
	return c.forceRelease(ctx, st)
}

// forceRelease releases the holders st found, each as itself.
func (c *Client) forceRelease(ctx context.Context, st *nameState) (int, error) {
	released := 0
	var failed []error
	for _, h := range st.held {
		ok, err := c.releaseAs(ctx, st, h)
		if err != nil {
			failed = append(failed, errs.Redis(st.op, st.name, err))
		}
		if ok {
			released++
		}
	}
	return released, errs.Join(failed...)
}

// releaseAs runs the release script of h's primitive as h's owner. It
// reports whether h still held it (and no longer does, or holds only what
// it gained since st was read).
func (c *Client) releaseAs(ctx context.Context, st *nameState, h heldBy) (bool, error) {
	var err error
	switch h.kind {
	case KindMutex:
		err = c.Mutex(st.name).release(ctx, h.member)
	case KindElection:
		err = c.Election(st.name).m.release(ctx, h.member)
	case KindReentrant:
		m := c.ReentrantMutex(st.name)
		released := false
		for _, id := range h.holdIDs {
			// Not attached to an anchor: release only runs the script.
			hold := &reentrantHold{m: m, owner: h.member, hold: id}
			err = hold.release(ctx, id+h.member)
			if err != nil {
				break
			}
			released = true
		}
		if errors.Is(err, ErrNotHeld) {
			return released, nil
		}
		return released, err
	case KindRWMutex:
		rw := c.RWMutex(st.name)
		half := &rw.reader
		if h.member[0] == rwWrite {
			half = &rw.writer
		}
		err = half.release(ctx, h.member[1:])
	case KindSemaphore:
		s := c.Semaphore(st.name, semLimitHint(st))
		err = (&semAcquisition{s: s}).release(ctx, h.member)
	default:
		return false, nil
	}
	if errors.Is(err, ErrNotHeld) {
		return false, nil
	}
	return err == nil, err
}

// semLimitHint is the limit a forced semaphore release serves the queue
// with when SetPermits stored none: Redis does not know the permits the
// callers pass. Their limit is at least every held and every requested
// amount (a request above it is refused), so this never grants more than
// they would. When it is below their limit, waiters it leaves queued are
// served by their own next attempt, which uses theirs.
func semLimitHint(st *nameState) int {
	hint := 1
	for _, info := range st.infos {
		if info.Kind != KindSemaphore {
			continue
		}
		held := 0
		for _, h := range info.Holders {
			held += h.Permits
		}
		hint = max(hint, held, info.Permits)
		for _, w := range info.Waiters {
			hint = max(hint, w.Permits)
		}
	}
	return min(hint, MaxPermits)
}
