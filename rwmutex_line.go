package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/wait"
)

// An RWMutex's writers of one Client wait in its local line, as a Mutex's
// waiters do (mutex_wait.go): one place in the queue in Redis stands for
// them all, and a writer's Unlock may hand the lock straight to the next.
// Readers keep a place each (wait.Places): they are granted together, and
// a line that serves one waiter at a time would serialize them.

var _ lineLock = (*rwHalf)(nil)

// lock is Lock after its options are checked: the wait of the Client's
// writers in their line.
func (rw *RWMutex) lock(ctx context.Context) (*Lease, error) {
	if err := rw.c.checkOpen("Lock", rw.name); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, errs.WaitEnded(ctx, rw.name, time.Now(), 0, nil)
	}
	return rw.c.lockShared(ctx, &rw.writer)
}

func (h *rwHalf) lineKey() localQueueKey {
	cfg := &h.rw.cfg
	return localQueueKey{lock: h.rw.keys.holders, ttl: cfg.ttl, maxHold: cfg.maxHold, waiterLease: cfg.waiterLease}
}

func (h *rwHalf) lineCfg() *config { return &h.rw.cfg }

func (h *rwHalf) newPlace() (string, error) { return ownerid.New(h.rw.cfg.ownerInfo) }

func (h *rwHalf) sharesPlace() bool { return true }

func (h *rwHalf) firstAttempt(ctx context.Context, owner string) (wait.Result, error) {
	return h.attempt(ctx, owner, true)
}

func (h *rwHalf) held() bool { return false }

func (h *rwHalf) sameOwner(lineLock) bool { return false }

// unlock is Unlock's release: a writer's may hand the lock to a writer of
// this Client waiting in its line.
func (h *rwHalf) unlock(ctx context.Context, owner string) error {
	if h.mode == rwWrite {
		if done, err := h.rw.c.handOff(ctx, h, owner); done {
			return err
		}
	}
	return h.release(ctx, owner)
}

func (h *rwHalf) transfer(ctx context.Context, owner, next string, px time.Duration) (fence int64, moved, resent bool, err error) {
	rw := h.rw
	fence, r, err := protocol.RWTransfer(ctx, rw.c.drv, rw.keys.holders, rw.keys.fence, rw.keys.tokens,
		h.member(owner), h.member(next), px, fenceRetention(rw.cfg.ttl))
	return fence, true, r.Resent, err
}

func (h *rwHalf) releaser() queuedLock { return h }
