package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/scripts"
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

// deliver tells this Client's waiters of the grants a script reports as
// {member, fence, px, ...}, ahead of the pub/sub messages. It reports
// whether the list was well formed.
func (rw *RWMutex) deliver(grants []any) bool {
	if len(grants)%3 != 0 {
		return false
	}
	for i := 0; i < len(grants); i += 3 {
		member, ok1 := grants[i].(string)
		fence, ok2 := grants[i+1].(int64)
		px, ok3 := grants[i+2].(int64)
		if !ok1 || !ok2 || !ok3 || len(member) < 2 {
			return false
		}
		rw.c.notify.Deliver(rw.keys.holders, member[1:], fence, ms(px))
	}
	return true
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
	a := newScriptCall(scripts.RWAcquire, rw.keys.all, h.member(owner))
	a.setArgs(&a.member, &rw.ms.ttl, boolFlag(queue), &rw.ms.waiterLease,
		&rw.ms.claimWindow, &rw.ms.fenceRetention,
		publishArg(rw.c.drv), &rw.keys.holders)
	call := &a.call
	rw.cfg.askAck(call)
	a.run(ctx, rw.c.drv)
	if call.Err != nil {
		return wait.Result{}, call.Err
	}
	if fence, ok := call.Reply.(int64); ok { // the free lock taken: the fast path's bare fence
		if fence <= 0 {
			return wait.Result{}, errs.Unexpected(call.Reply)
		}
		return grantAcked(ctx, h, &rw.cfg, owner, call, wait.Result{Granted: true, Fence: fence, PTTL: ms(rw.ms.ttl)})
	}
	v, err := replyInts(call.Reply, 3)
	if err != nil {
		return wait.Result{}, err
	}
	if v[0] == 1 {
		return grantAcked(ctx, h, &rw.cfg, owner, call, wait.Result{Granted: true, Fence: v[1], PTTL: ms(v[2])})
	}
	r := wait.Result{PTTL: ms(v[1]), LastFence: lastFenceAt(call.Reply, 4)}
	if items, _ := call.Reply.([]any); len(items) > 3 {
		if free, _ := items[3].(int64); free == 1 {
			r.QueuedAhead = "it is free for a writer, but " + errs.OthersFirst
			if h.mode == rwRead {
				r.QueuedAhead = "no writer holds it, but a writer waiting for it goes first (writers are preferred, so readers cannot starve them)"
			}
		}
	}
	return r, nil
}

// release runs rw_release.lua, for Unlock and for a waiter that gives up,
// and translates its reply. Waiters of this Client that it granted are told
// directly.
func (h *rwHalf) release(ctx context.Context, owner string) error {
	rw := h.rw
	a := newScriptCall(scripts.RWRelease, rw.keys.all, h.member(owner))
	a.setArgs(&a.member, &rw.ms.fenceRetention, publishArg(rw.c.drv), &rw.keys.holders)
	call := &a.call
	a.run(ctx, rw.c.drv)
	if call.Err != nil {
		return call.Err
	}
	if held, ok := call.Reply.(int64); ok && held == 1 { // the fast path: released, nobody waits
		return nil
	}
	items, ok := call.Reply.([]any)
	if !ok || len(items) == 0 {
		return errs.Unexpected(call.Reply)
	}
	held, ok := items[0].(int64)
	if !ok || !rw.deliver(items[1:]) {
		return errs.Unexpected(call.Reply)
	}
	if held != 1 {
		return notHeld(call)
	}
	return nil
}

// renewCalls re-arms the holder's own expiry (rw_extend.lua, whose replies
// follow owned_extend.lua's, so ownedExtendResult reads them).
func (h *rwHalf) renewCalls(owner string, px time.Duration, shorten bool) []*driver.Call {
	return []*driver.Call{{Script: scripts.RWExtend, Keys: h.rw.keys.renew, Args: extendArgs(shorten, h.member(owner), px.Milliseconds())}}
}

func (h *rwHalf) renewResult(calls []*driver.Call) error { return ownedExtendResult(calls) }

func (h *rwHalf) renew(ctx context.Context, owner string, px time.Duration, shorten bool) error {
	return renewVia(ctx, h.rw.c.drv, h, owner, px, shorten)
}

// remaining runs rw_pttl.lua and translates its reply.
func (h *rwHalf) remaining(ctx context.Context, owner string) (time.Duration, error) {
	keys := []string{h.rw.keys.holders}
	return remainingVia(ctx, h.rw.c.drv, scripts.RWPTTL, keys, h.member(owner), nil)
}
