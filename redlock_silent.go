package dlock

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
)

// Silent nodes.
//
// A node that stops answering (frozen, partitioned, or down: go-redis
// retries a refused dial for about half a second) must cost a Redlock call
// at most one node timeout, once, and nothing once it is known. So each
// node remembers whether it answers (nodeHealth): a request that gets no
// reply within its fan-out's deadline, or fails for want of a connection,
// marks the node silent, and any reply from it, even an error reply,
// clears the mark. Then:
//
//   - an attempt does not wait for a silent node once every other node has
//     answered, if those are a quorum (acquireDecided): the live nodes
//     decide, even where the silent node's grant would have completed a
//     quorum (it would most likely not come within the node timeout; Lock
//     tries again). So a waiter spends its time between attempts, where a
//     release on the live nodes wakes it at once, not in an attempt that
//     waits for the node. With fewer live nodes than a quorum, the silent
//     ones are waited for: a client cut off from most nodes, or too loaded
//     to hear them in time (which marks them all), would otherwise fail
//     every attempt at once, and a Lock would send the next at once;
//   - a release (Unlock, or what a failed hand-off did not move) returns
//     once a quorum released and every node that answers has answered
//     (releaseDecided);
//   - Unlock and a hand-off wait for the acquisition's requests still
//     running only on nodes that answer (redlockHold.split): the release
//     for a silent node follows its request in the background.
//
// What a silent node is owed besides is never waited for: the give-back of
// a failed attempt's share on a node that did not grant one (giveBack),
// and a waiter's subscription, once enough nodes are subscribed to hear
// any holder's release (redlockListener.subscribe). All of it runs on the
// Redlock's workers, each request bounded by the node timeout, and Close
// waits for it. A node is never skipped: every fan-out still sends it its
// request, and its first reply clears the mark. A node that has just gone
// silent, not yet marked, is waited for like any other, up to the node
// timeout: nodes that answer are always waited for, so with every node up
// nothing changes.

// nodeHealth tells whether a node answers. It is safe for concurrent use.
type nodeHealth struct {
	// silent is why the node's last request got no reply (nil while it
	// answers).
	silent atomic.Pointer[error]
}

// note records how a request to the node ended: err is its error, and
// callerEnded says whether the caller's context had ended, which says
// nothing about the node.
func (h *nodeHealth) note(err error, callerEnded bool) {
	switch {
	case err == nil || errs.IsReply(err):
		// A load first: a store on every reply would bounce the cache
		// line between cores.
		if h.silent.Load() != nil {
			h.silent.Store(nil)
		}
	case !callerEnded:
		// A copy: taking err's address would move it to the heap on
		// every call.
		why := err
		h.silent.Store(&why)
	}
}

// timedOut records that a request got no reply within wait.
func (h *nodeHealth) timedOut(wait time.Duration) {
	err := fmt.Errorf("no reply within %v: %w", wait.Round(time.Microsecond), os.ErrDeadlineExceeded)
	h.silent.Store(&err)
}

// silentErr returns why the node is silent, or nil while it answers.
func (h *nodeHealth) silentErr() error {
	if p := h.silent.Load(); p != nil {
		return *p
	}
	return nil
}

// unanswered counts the nodes asked in a fan-out that have not answered
// yet: those that answer (live), and silent ones.
func (r *Redlock) unanswered(replies []nodeReply) (live, silent int) {
	for i, rep := range replies {
		switch {
		case rep.skipped || rep.done:
		case r.nodes[i].health.silentErr() != nil:
			silent++
		default:
			live++
		}
	}
	return live, silent
}

// silentError describes node i, which a fan-out stopped waiting for
// because it was silent and its answer could not matter.
func (r *Redlock) silentError(ctx context.Context, i int) *NodeError {
	if ctx.Err() != nil {
		return &NodeError{Addr: r.nodes[i].addr, Err: ctx.Err()}
	}
	err := r.nodes[i].health.silentErr()
	if err == nil { // it answered since: too late for this call
		err = os.ErrDeadlineExceeded
	}
	return &NodeError{Addr: r.nodes[i].addr,
		Err: fmt.Errorf("not waited for, silent since an earlier request: %w", err)}
}
