package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/wait"
)

// rwHalf is one mode of an RWMutex: the queuedLock that the shared waiting
// loop (Client.acquire) and the watchdog work with. The owner values they
// pass around are the usual fresh ones; in Redis a holder or waiter is known
// by its member, the mode byte followed by the owner value. Grant messages
// name the owner value alone, which is unique already, so the notifier
// routes them to the waiter registered under it.
type rwHalf struct {
	rw   *RWMutex
	mode byte
}

// deliver tells this Client's waiter owner of its grant, ahead of the
// pub/sub message.
func (rw *RWMutex) deliver(owner string, fence int64, px time.Duration) {
	rw.c.notify.Deliver(rw.keys.holders, owner, fence, px)
}

func (h *rwHalf) member(owner string) string { return string(h.mode) + owner }

func (h *rwHalf) place(owner string) wait.Place {
	return wait.Place{Queue: h.rw.keys.queue, Waiters: h.rw.keys.waiters, Member: h.member(owner)}
}

func (h *rwHalf) lockName() string { return h.rw.name }

func (h *rwHalf) kind() Kind { return KindRWMutex }

func (h *rwHalf) verbs() (try, wait string) {
	if h.mode == rwRead {
		return "TryRLock", "RLock"
	}
	return "TryLock", "Lock"
}

func (h *rwHalf) channel() string { return h.rw.keys.holders }

// attempt runs rw_acquire.lua and translates its reply.
func (h *rwHalf) attempt(ctx context.Context, owner string, queue bool) (wait.Result, error) {
	rw := h.rw
	a, err := protocol.RWAcquire(ctx, rw.c.drv, rw.keys.all[:], h.member(owner), &rw.cfg.pxMillis, queue, &rw.cfg.timings, rw.cfg.ack())
	if err != nil {
		return wait.Result{}, err
	}
	r, err := grantAcked(ctx, h, &rw.cfg, owner, a)
	if !a.Granted && a.Free == 1 {
		r.QueuedAhead = "it is free for a writer, but " + errs.OthersFirst
		if h.mode == rwRead {
			r.QueuedAhead = "no writer holds it, but a writer waiting for it goes first (writers are preferred, so readers cannot starve them)"
		}
	}
	return r, err
}

// release runs rw_release.lua, for Unlock and for a waiter that gives up,
// and translates its reply. Waiters of this Client that it granted are told
// directly.
func (h *rwHalf) release(ctx context.Context, owner string) error {
	rw := h.rw
	r, err := protocol.RWRelease(ctx, rw.c.drv, rw.keys.all[:], h.member(owner), &rw.cfg.timings, rw.deliver)
	return releaseErr(r, err)
}

// RenewCalls re-arms the holder's own expiry (rw_extend.lua, whose replies
// follow owned_extend.lua's, so protocol.ExtendResult reads them).
func (h *rwHalf) RenewCalls(owner string, px time.Duration, shorten bool) []*driver.Call {
	return protocol.RWExtend(h.rw.keys.renew[:], h.member(owner), px, shorten).Batch()
}

func (h *rwHalf) RenewResult(calls []*driver.Call) error { return protocol.ExtendResult(calls) }

func (h *rwHalf) RecordCalls(owner string, age, retention time.Duration) []*driver.Call {
	return []*driver.Call{protocol.HeldRecord(h.rw.keys.held, h.member(owner), age, retention)}
}

func (h *rwHalf) Renew(ctx context.Context, owner string, px time.Duration, shorten bool) error {
	return renewVia(ctx, h.rw.c.drv, h, owner, px, shorten)
}

// remaining runs rw_pttl.lua and translates its reply.
func (h *rwHalf) Remaining(ctx context.Context, owner string) (time.Duration, error) {
	return protocol.RWPTTL(ctx, h.rw.c.drv, h.rw.keys.holders, h.member(owner))
}
