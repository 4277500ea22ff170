package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/wait"
)

// The holds of a Client's owners wait in its local line (lineLock), each
// place in Redis under its own hold id and owner.

func (h *reentrantHold) lineKey() localQueueKey {
	m := h.m
	return localQueueKey{lock: m.keys.lock, ttl: m.cfg.ttl, maxHold: m.cfg.maxHold, waiterLease: m.cfg.waiterLease}
}

func (h *reentrantHold) lineCfg() *config { return &h.m.cfg }

// newPlace gives the hold a fresh id: a place given up is cleaned up in
// the background, which must not meet the hold's next place or grant.
func (h *reentrantHold) newPlace() (string, error) {
	member := h.fresh
	h.fresh = ""
	if member == "" {
		var err error
		if member, err = ownerid.Prefixed(h.owner); err != nil {
			return "", err
		}
	}
	h.hold, h.member, h.grant = member[:ownerid.IDLen], member, ""
	return member, nil
}

func (h *reentrantHold) sharesPlace() bool { return false }

func (h *reentrantHold) firstAttempt(ctx context.Context, member string) (wait.Result, error) {
	return h.attempt(ctx, member, true)
}

func (h *reentrantHold) held() bool { return h.m.c.anchors.owns(h.m.keys.lock, h.owner) }

func (h *reentrantHold) sameOwner(d lineLock) bool {
	o, ok := d.(*reentrantHold)
	return ok && o.owner == h.owner
}

func (h *reentrantHold) transfer(ctx context.Context, member, next string, px time.Duration) (fence int64, moved, resent bool, err error) {
	m := h.m
	fence, moved, r, err := protocol.ReentrantTransfer(ctx, m.c.drv, m.keys.lock, m.keys.fence, m.holds, member, next, px, fenceRetention(m.cfg.ttl))
	return fence, moved, r.Resent, err
}

// releaser is a hold that no goroutine uses, for clean-ups in the
// background: release reads only the member it is given.
func (h *reentrantHold) releaser() queuedLock { return &reentrantHold{m: h.m, owner: h.owner} }
