package dlock

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
)

// Silent nodes: a node that stops answering costs a Redlock call at most one
// node timeout, once. A request that gets no reply within its fan-out's
// deadline, or fails for want of a connection, marks its node silent, and any
// reply clears the mark. Attempts and releases do not wait for a silent node
// once the nodes that answer are a quorum; what it is owed goes on in the
// background, on the Redlock's workers. See docs/redlock.md, "Silent nodes".

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
