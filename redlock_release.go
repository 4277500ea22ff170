package dlock

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
)

// release deletes our key on every node (Unlock). It counts as released
// once fewer than a quorum of nodes can still hold our key; the keys on
// nodes it could not reach expire by their TTL. It returns ErrNotHeld when
// too many nodes had already lost our key for a quorum to be left, and
// ErrQuorum when a quorum may still hold it.
func (h *redlockHold) release(ctx context.Context, owner string) error {
	h.awaitSettled() // a late grant must not land after its release
	// Wait for every node (each bounded by the node timeout), so that when
	// Unlock returns no reachable node still holds the key.
	return h.m.releaseVerdict(h.m.releaseOn(ctx, owner, nil, true, nil, nil))
}

// releaseTally counts the answers to a release of our key on every node.
type releaseTally struct {
	released int // gave it up
	gone     int // no longer held it
	// resentGone no longer held it, but a command of ours whose outcome was
	// not known may have removed it: the release sent before by the node's
	// client (driver.Call.Resent), or a hand-off that did not answer.
	resentGone int
	failed     nodeErrors // did not answer
}

// releaseVerdict judges a release of our key on every node.
func (m *RedlockMutex) releaseVerdict(t releaseTally) error {
	n, q := len(m.r.nodes), quorum(len(m.r.nodes))
	switch {
	case t.gone > n-q:
		return fmt.Errorf("%w: %d of %d nodes no longer held it", ErrNotHeld, t.gone, n)
	case t.gone+t.resentGone > n-q:
		return fmt.Errorf("%w: %d of %d nodes no longer held it", errResentRelease, t.gone+t.resentGone, n)
	case t.released+t.gone+t.resentGone > n-q:
		if len(t.failed) > 0 {
			m.cfg.logger.Warn("dlock: Unlock could not reach every Redlock node; the lock's key there expires by its TTL",
				slog.String("lock", m.name), slog.Any("error", t.failed))
		}
		return nil
	}
	return fmt.Errorf("%w: released on %d of %d nodes; the others may still hold a quorum: %w", ErrQuorum, t.released, n, t.failed)
}

// giveBack gives back a failed acquisition's shares for owner on the nodes
// in which, detached from ctx's cancellation. replies are the acquisition's
// replies as its fan-out returned them. On a node whose request had
// returned then, or on every node when all requests have returned since,
// the release goes now: giveBack waits until the nodes that granted their
// share (granted) have answered, and the others' releases go on in the
// background (they are unreachable, or too slow to matter). On a node whose
// request was still running, the release goes in the background once every
// request of the acquisition has returned, however long its client takes
// (or when the Redlock closes): sent before, it could reach the node ahead
// of a grant still on its way there, which would then stay until its TTL.
// Each release is bounded by the node timeout alone; what it cannot reach
// expires by its TTL.
//
// It reports whether every release answered. Otherwise one may still reach
// its node at any later time, and the caller must not use owner again.
func (h *redlockHold) giveBack(ctx context.Context, owner string, which []bool, replies []nodeReply, granted []bool) (answered bool) {
	m := h.m
	some := countTrue(which)
	if some == 0 {
		return true
	}
	// Waiters wait only for an owner seen on a quorum of the nodes (see
	// redlock_wait.go): tell them only when these shares may be as many.
	tell := some >= quorum(len(m.r.nodes))
	ctx = context.WithoutCancel(ctx)
	now, later := which, []bool(nil)
	select {
	case <-h.settled:
	default:
		for i, set := range which {
			if set && !replies[i].done {
				if later == nil {
					now, later = append([]bool(nil), which...), make([]bool, len(which))
				}
				now[i], later[i] = false, true
			}
		}
	}
	if later != nil {
		m.r.workers.Go(func() {
			select {
			case <-h.settled:
			case <-m.r.closed:
			}
			m.releaseOn(ctx, owner, later, tell, nil, nil)
		})
	}
	if countTrue(now) == 0 {
		return false // all later
	}
	enough := func(replies []nodeReply) bool {
		for i, rep := range replies {
			if granted[i] && !rep.done {
				return false
			}
		}
		return true
	}
	t := m.releaseOn(ctx, owner, now, tell, enough, nil)
	if len(t.failed) > 0 {
		m.cfg.logger.Warn("dlock: could not release a failed Redlock acquisition on every node; the lock's key there expires by its TTL",
			slog.String("lock", m.name), slog.Any("error", t.failed))
	}
	return later == nil && t.released+t.gone+t.resentGone == countTrue(now)
}

// countTrue counts the nodes set in a per-node mask.
func countTrue(mask []bool) int {
	n := 0
	for _, set := range mask {
		if set {
			n++
		}
	}
	return n
}

// releaseOn runs the compare-and-delete on the nodes in which (all when nil),
// in parallel, each bounded by the node timeout, publishing the release to
// the lock's waiters when tell is set. It waits for every answer,
// or until enough (if not nil) says that the rest cannot matter: their
// requests then finish in the background, and they are not counted as
// failed. unsure (if not nil) marks the nodes where a command of ours whose
// outcome is unknown may have removed our key already.
func (m *RedlockMutex) releaseOn(ctx context.Context, owner string, which []bool, tell bool, enough func([]nodeReply) bool, unsure []bool) (t releaseTally) {
	publish := "0"
	if tell {
		publish = "1"
	}
	calls := m.nodeCalls(which, scripts.OwnedRelease, owner, publish)
	wait := redlockNodeTimeout(&m.cfg)
	replies, _ := m.r.fanout(ctx, time.Now().Add(wait), calls, enough)
	early := enough != nil && enough(replies)
	for i, rep := range replies {
		switch {
		case rep.skipped:
		case !rep.done:
			if !early {
				t.failed = append(t.failed, m.r.nodeError(ctx, i, false, nil, wait))
			}
		case rep.err != nil:
			t.failed = append(t.failed, m.r.nodeError(ctx, i, true, rep.err, wait))
		case rep.reply == int64(1):
			t.released++
		case rep.reply == int64(0) && (rep.resent || unsure != nil && unsure[i]):
			t.resentGone++
		case rep.reply == int64(0):
			t.gone++
		default:
			t.failed = append(t.failed, m.r.nodeError(ctx, i, true, unexpectedReply(rep.reply), wait))
		}
	}
	return t
}
