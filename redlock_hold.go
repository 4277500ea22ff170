package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// redlockHold is the holder of one Redlock lease: its renewals, release and
// TTL go to every node.
type redlockHold struct {
	m *RedlockMutex
	// replies are the acquisition's, as its fan-out returned them, and tail
	// its requests still running then: a node not done may still be
	// granting (split). None runs past deadline unless the node's client
	// ignores deadlines or the driver's batching sent it in a pipeline,
	// which has none (see attempt).
	replies  []nodeReply
	tail     fanoutTail
	deadline time.Time
	handoffs int // local hand-offs in a row that led to it (wait.Line.Successor)
}

var (
	_ holder   = (*redlockHold)(nil)
	_ unlocker = (*redlockHold)(nil)
	_ drifter  = (*redlockHold)(nil)
)

func (h *redlockHold) lockName() string { return h.m.name }

func (h *redlockHold) kind() Kind { return KindMutex }

func (h *redlockHold) Drift(px time.Duration) time.Duration { return h.m.drift(px) }

// renew re-arms the key for px on every node. It succeeds only when a quorum
// renewed it within the validity this renewal gives (px − drift from its
// start); it returns ErrNotHeld once so many nodes no longer hold our key
// that no quorum is left.
func (h *redlockHold) Renew(ctx context.Context, owner string, px time.Duration, shorten bool) error {
	m := h.m
	n, q := len(m.r.nodes), quorum(len(m.r.nodes))
	start := time.Now()
	valid := px - m.drift(px)
	wait := redlockNodeTimeout(&m.cfg)
	if valid > 0 && valid < wait {
		wait = valid
	}
	calls := m.nodeCalls(nil, protocol.OwnedExtend(m.key, "", owner, px, shorten))
	count := func(replies []nodeReply) (renewed, gone int) {
		for _, rep := range replies {
			if rep.done && rep.err == nil {
				switch v, _ := rep.reply.(int64); v {
				case 1:
					renewed++
				case 0:
					gone++
				}
			}
		}
		return renewed, gone
	}
	replies, _ := m.r.fanout(ctx, start.Add(wait), calls, func(replies []nodeReply) bool {
		renewed, gone := count(replies)
		return renewed >= q || gone > n-q
	})
	elapsed := time.Since(start)
	renewed, gone := count(replies)
	switch {
	case renewed >= q && elapsed < valid:
		return nil
	case renewed >= q:
		return fmt.Errorf("%w: a quorum (%d of %d nodes) renewed it only after %v, past the validity of %v",
			ErrQuorum, renewed, n, elapsed.Round(time.Millisecond), valid)
	case gone > n-q:
		return fmt.Errorf("%w: %d of %d nodes no longer hold it", ErrNotHeld, gone, n)
	}
	var failed nodeErrors
	for i, rep := range replies {
		err := rep.err
		if rep.done && err == nil {
			if v, ok := rep.reply.(int64); ok && (v == 0 || v == 1) {
				continue
			}
			err = errs.Unexpected(rep.reply)
		}
		failed = append(failed, m.r.nodeError(ctx, i, rep.done, err, wait))
	}
	return fmt.Errorf("%w: renewed on %d of %d nodes, %d needed: %w", ErrQuorum, renewed, n, q, failed)
}

// remaining is how long a quorum of the nodes still hold our key: the
// quorum-th longest of the remaining times on the nodes that hold it.
func (h *redlockHold) Remaining(ctx context.Context, owner string) (time.Duration, error) {
	m := h.m
	n, q := len(m.r.nodes), quorum(len(m.r.nodes))
	calls := m.nodeCalls(nil, protocol.OwnedPTTLCall(m.key, owner))
	wait := redlockNodeTimeout(&m.cfg)
	replies, _ := m.r.fanout(ctx, time.Now().Add(wait), calls, nil)
	var (
		ours   []time.Duration
		gone   int
		failed nodeErrors
	)
	for i, rep := range replies {
		err := rep.err
		if rep.done && err == nil {
			d, perr := protocol.OwnedPTTLReply(rep.reply)
			switch {
			case perr == nil:
				ours = append(ours, d)
				continue
			case perr == errs.ErrNotHeld:
				gone++
				continue
			}
			err = perr
		}
		failed = append(failed, m.r.nodeError(ctx, i, rep.done, err, wait))
	}
	if d, ok := quorumRemaining(q, ours); ok {
		return d, nil
	}
	if gone > n-q {
		return 0, fmt.Errorf("%w: %d of %d nodes no longer hold it", ErrNotHeld, gone, n)
	}
	return 0, fmt.Errorf("%w: %d of %d nodes hold it, %d needed: %w", ErrQuorum, len(ours), n, q, failed)
}
