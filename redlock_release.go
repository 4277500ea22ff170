package dlock

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// release deletes our key on every node (Unlock). It counts as released
// once fewer than a quorum of nodes can still hold our key; the keys on
// nodes it could not reach expire by their TTL. It returns ErrNotHeld when
// too many nodes had already lost our key for a quorum to be left, and
// ErrQuorum when a quorum may still hold it.
//
// It waits for every node that answers (each bounded by the node timeout),
// so that when Unlock returns none of them still holds the key; a silent
// node is not waited for once a quorum released (redlock_silent.go), and
// its release goes on in the background.
func (h *redlockHold) release(ctx context.Context, owner string) error {
	now, later := h.split(ctx, nil, true)
	h.releaseLater(ctx, owner, later, true)
	return h.m.releaseVerdict(h.m.releaseOn(ctx, owner, now, true, h.m.releaseDecided(0), nil))
}

// split divides the nodes in which (all when nil) into those whose request
// of the acquisition has returned, where a release may go now, and the
// others (later, nil when none), where it must follow that request: sent
// before, it could reach the node ahead of a grant still on its way there,
// which would then stay until its TTL. With wait set, it first waits for
// the requests to nodes that answer, until the acquisition's deadline or
// ctx's end; a silent node's request is not waited for.
func (h *redlockHold) split(ctx context.Context, which []bool, wait bool) (now, later []bool) {
	for i, rep := range h.replies {
		if !rep.done && !rep.skipped && (which == nil || which[i]) {
			if later == nil {
				later = make([]bool, len(h.replies))
			}
			later[i] = true
		}
	}
	if later == nil || h.returned(later, wait, ctx.Done()) {
		return which, nil
	}
	now = make([]bool, len(later))
	for i := range now {
		now[i] = (which == nil || which[i]) && !later[i]
	}
	return now, later
}

// returned clears in pending the nodes whose request of the acquisition
// has returned, and reports whether all have. With wait set, it waits while
// a node that answers is pending, until the acquisition's deadline or
// stop.
func (h *redlockHold) returned(pending []bool, wait bool, stop <-chan struct{}) bool {
	// The acquisition's tail expires at its deadline, which bounds the wait
	// without a timer of its own; a timer is made only when the tail
	// expired before the deadline (its requests' ctx ended).
	expired := h.tail.expired
	var (
		timer  *time.Timer
		timerC <-chan time.Time
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-h.tail.settled:
			return true
		case i := <-h.tail.returned:
			pending[i] = false
			continue
		default:
		}
		live := false
		for i, p := range pending {
			live = live || p && h.m.r.nodes[i].health.silentErr() == nil
		}
		if !wait || !live {
			return countTrue(pending) == 0
		}
		if expired == nil && timer == nil {
			timer = time.NewTimer(time.Until(h.deadline))
			timerC = timer.C
		}
		select {
		case <-h.tail.settled:
			return true
		case i := <-h.tail.returned:
			pending[i] = false
		case <-expired:
			expired = nil
			wait = time.Now().Before(h.deadline)
		case <-timerC:
			wait = false
		case <-stop:
			wait = false
		}
	}
}

// releaseLater releases owner's key on the nodes in later (if any) in the
// background, once every request of the acquisition has returned, however
// long its client takes, or when the Redlock closes; the release timeout
// counts from then. tell publishes the release to waiters.
func (h *redlockHold) releaseLater(ctx context.Context, owner string, later []bool, tell bool) {
	if later == nil {
		return
	}
	m := h.m
	m.r.workers.Go(func() {
		select {
		case <-h.tail.settled:
		case <-m.r.closed:
		}
		rctx, cancel := detach(ctx, m.cfg.releaseTimeout)
		defer cancel()
		if t := m.releaseOn(rctx, owner, later, tell, nil, nil); len(t.failed) > 0 {
			m.cfg.logger.Warn("dlock: a Redlock node did not answer a release; the lock's key there expires by its TTL",
				slog.String("lock", m.name), slog.Any("error", t.failed))
		}
	})
}

// releaseDecided returns the enough of a release fan-out that may leave
// silent nodes behind: a quorum released (already of them released
// otherwise), and every node that answers has answered.
func (m *RedlockMutex) releaseDecided(already int) func([]nodeReply) bool {
	q := quorum(len(m.r.nodes))
	return func(replies []nodeReply) bool {
		released := already
		for _, rep := range replies {
			if rep.done && rep.err == nil && rep.reply == int64(1) {
				released++
			}
		}
		if released < q {
			return false
		}
		live, _ := m.r.unanswered(replies)
		return live == 0
	}
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
// in which, detached from ctx's cancellation. It waits, until ctx ends, for
// the nodes that granted their share (granted) to answer: they answered
// the acquisition just now. The other nodes' releases go on in the
// background: those nodes failed the acquisition, and may be silent (a
// give-back waited for there would add a node timeout to a failed TryLock,
// and keep a Lock past its deadline). On a node whose request of the
// acquisition is still running, the release follows it (releaseLater).
// Each release is bounded by the node timeout alone; what it cannot reach
// expires by its TTL.
//
// It reports whether every release answered. Otherwise one may still reach
// its node at any later time, and the caller must not use owner again.
func (h *redlockHold) giveBack(ctx context.Context, owner string, which, granted []bool) (answered bool) {
	m := h.m
	some := countTrue(which)
	if some == 0 {
		return true
	}
	// Waiters wait only for an owner seen on a quorum of the nodes (see
	// redlock_wait.go): tell them only when these shares may be as many.
	tell := some >= quorum(len(m.r.nodes))
	now, later := h.split(ctx, which, false)
	h.releaseLater(ctx, owner, later, tell)
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
	if len(t.failed) > 0 && ctx.Err() == nil { // the releases left at ctx's end are logged if they fail
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
// in parallel, each bounded by the node timeout and detached from ctx's
// cancellation, publishing the release to the lock's waiters when tell is
// set. It waits for every answer, or until enough (if not nil) says that
// the rest cannot matter, or until ctx ends: the requests left then go on
// in the background, are not counted as failed, and are logged if they
// fail. unsure (if not nil) marks the nodes where a command of ours whose
// outcome is unknown may have removed our key already.
func (m *RedlockMutex) releaseOn(ctx context.Context, owner string, which []bool, tell bool, enough func([]nodeReply) bool, unsure []bool) (t releaseTally) {
	calls := m.nodeCalls(which, protocol.OwnedRelease(m.key, owner, tell))
	wait := redlockNodeTimeout(&m.cfg)
	replies, tail := m.r.fanoutDetached(ctx, time.Now().Add(wait), calls, enough)
	left := false
	for i, rep := range replies {
		switch {
		case rep.skipped:
		case !rep.done:
			// Left by enough (a silent node, see redlock_silent.go) or when
			// ctx ended, it goes on in the background.
			left = left || !rep.late
			if rep.late || ctx.Err() != nil {
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
			t.failed = append(t.failed, m.r.nodeError(ctx, i, true, errs.Unexpected(rep.reply), wait))
		}
	}
	if left {
		m.logLeftReleases(ctx, calls, replies, tail.settled, wait)
	}
	return t
}

// logLeftReleases logs, in the background, the releases of calls that a
// release fan-out left running and that then failed.
func (m *RedlockMutex) logLeftReleases(ctx context.Context, calls []*driver.Call, replies []nodeReply, settled <-chan struct{}, wait time.Duration) {
	ctx = context.WithoutCancel(ctx)
	// Only the calls left, in a slice of their own: calls stays the
	// caller's, on its stack.
	left := make([]*driver.Call, len(calls))
	for i, rep := range replies {
		if !rep.skipped && !rep.done {
			left[i] = calls[i]
		}
	}
	m.r.workers.Go(func() {
		select {
		case <-settled:
		case <-m.r.closed:
			return
		}
		var failed nodeErrors
		for i, c := range left {
			if c != nil && c.Err != nil {
				failed = append(failed, m.r.nodeError(ctx, i, true, c.Err, wait))
			}
		}
		if len(failed) > 0 {
			m.cfg.logger.Warn("dlock: a Redlock node did not answer a release; the lock's key there expires by its TTL",
				slog.String("lock", m.name), slog.Any("error", failed))
		}
	})
}
