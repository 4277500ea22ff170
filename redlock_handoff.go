package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/protocol"
)

// Local hand-off of a Redlock lock: an Unlock whose Redlock has a Lock waiting
// for the same name moves every node's key to a fresh owner value in one
// fan-out (owned_transfer.lua) and hands the result to the waiter itself. The
// keys are never free in between. A lease that was the last of
// wait.MaxLocalHandoffs hand-offs in a row is released on the nodes instead, so
// other processes get their chance. See docs/redlock.md, "Local hand-off".

// unlock is Unlock: hand the lock to this Redlock's waiting Lock for it, if
// the local line has one (see above), or release it on every node.
func (h *redlockHold) unlock(ctx context.Context, owner string) error {
	heir, streak := h.m.r.line.Successor(h.m.key, h.handoffs, anyRedlockHeir)
	if heir == nil {
		return h.release(ctx, owner)
	}
	n := len(h.m.r.nodes)
	var (
		res     acquireResult
		moved   = make([]bool, n)
		mayHold = make([]bool, n)
	)
	// The transfer goes to the nodes whose request of the acquisition has
	// returned, which hold a quorum; on the others a late grant could land
	// after it, so they are released once their request has returned.
	now, later := h.split(ctx, nil, true)
	// A fresh owner value: the heir's attempts, which may be in flight, use
	// another and cannot count the moved keys as theirs.
	next, err := ownerid.New(heir.D.cfg.ownerInfo)
	if err == nil {
		res, moved, mayHold = heir.D.transfer(ctx, owner, next, streak, now)
	}
	if res.hold != nil {
		heir.Give(redlockTurn{Owner: next, Grant: &res})
	} else {
		// The heir starts over (a head asks the nodes again) and this
		// process's turn ends.
		h.m.r.line.EndTurn(h.m.key, nil)
		heir.Give(redlockTurn{Restart: true})
	}
	h.releaseLater(ctx, owner, later, res.hold == nil)
	if res.hold != nil {
		return nil
	}
	// Release what did not move; what moved counts as released. Where the
	// transfer did not answer, it may have moved the key all the same: a
	// release that finds it gone there is not told from one we released.
	notMoved := make([]bool, n)
	unsure := make([]bool, n)
	for i, mv := range moved {
		notMoved[i] = (now == nil || now[i]) && !mv
		unsure[i] = mayHold[i] && !mv
	}
	t := h.m.releaseOn(ctx, owner, notMoved, true, h.m.releaseDecided(countTrue(moved)), unsure)
	t.released += countTrue(moved)
	return h.m.releaseVerdict(t)
}

// transfer moves the lock's key from owner from to owner to on the nodes in
// which (all when nil), the handoffs-th local hand-off in a row. It
// succeeds, returning the new owner's hold, when a quorum moved within the
// validity to's lease gets (m's TTL, counted from before the first
// request); otherwise it gives back to's shares. moved marks the nodes that
// answered that the key moved, mayHold those and the ones whose answer did
// not say it did not.
//
// It returns once a quorum moved; the other nodes' requests go on in the
// background, bounded by the node timeout but not by ctx: the Unlock that
// sent them ends ctx when it returns, and a node left to the old owner
// would hold its key until the TTL.
func (m *RedlockMutex) transfer(ctx context.Context, from, to string, handoffs int, which []bool) (res acquireResult, moved, mayHold []bool) {
	n, q := len(m.r.nodes), quorum(len(m.r.nodes))
	px := redlockPX(&m.cfg)
	valid := px - m.drift(px)
	start := time.Now()
	deadline := start.Add(min(redlockNodeTimeout(&m.cfg), valid))
	calls := m.nodeCalls(which, protocol.OwnedTransfer(m.key, from, to, px))
	isMoved := func(rep nodeReply) bool { return rep.done && rep.err == nil && rep.reply == int64(1) }
	replies, tail := m.r.fanout(context.WithoutCancel(ctx), deadline, calls, func(replies []nodeReply) bool {
		count := 0
		for _, rep := range replies {
			if isMoved(rep) {
				count++
			}
		}
		return count >= q
	})
	elapsed := time.Since(start)
	moved = make([]bool, n)
	mayHold = make([]bool, n) // moved, or no answer that says it did not
	for i, rep := range replies {
		switch {
		case rep.skipped:
		case isMoved(rep):
			moved[i], mayHold[i] = true, true
		case !rep.done || rep.err != nil:
			mayHold[i] = !errs.IsReply(rep.err) // an error reply: the script wrote nothing
		}
	}
	hold := &redlockHold{m: m, tail: tail, replies: replies, deadline: deadline, handoffs: handoffs}
	// Judged as an acquisition is: a failure to answer is not held against
	// it, since a quorum moved or it did not.
	if judgeAcquire(n, countTrue(moved), 0, elapsed, valid) == verdictGranted {
		return acquireResult{hold: hold, start: start, px: px}, moved, mayHold
	}
	hold.giveBack(ctx, to, mayHold, moved)
	return acquireResult{start: start}, moved, mayHold
}

// anyRedlockHeir: every waiting Lock of a Redlock may be handed the lock.
func anyRedlockHeir(*RedlockMutex) bool { return true }
