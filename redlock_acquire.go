package dlock

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// acquireResult is the outcome of one acquisition attempt on every node.
type acquireResult struct {
	hold  *redlockHold // granted: the lease's holder
	start time.Time    // when the attempt began; validity counts from here
	px    time.Duration
	// Not granted: err matches ErrNotObtained or ErrQuorum, or is nil when
	// ctx ended; holderTTL is when enough nodes could be free (0: unknown);
	// permanent means retrying cannot help.
	err       error
	holderTTL time.Duration
	permanent bool
	held      int  // the most nodes one other owner holds
	next      bool // most nodes that answered "held" say this line waited longest
	// spent: a give-back of the attempt may still reach a node, at any
	// time; the attempt's owner value must not be used again.
	spent bool
}

// acquireVerdict is what one attempt's tally means.
type acquireVerdict uint8

const (
	verdictGranted    acquireVerdict = iota
	verdictTooSlow                   // a quorum granted it, but after the validity
	verdictContention                // another owner holds too many nodes
	verdictNoQuorum                  // fewer than a quorum of nodes answered
)

// judgeAcquire decides an attempt on n nodes in which granted nodes gave us
// the lock and failed ones did not answer usably (the rest are held by
// another owner), elapsed after its start, for a validity of valid. When
// nodes failed and others are held, the failures win only if the nodes that
// answered are fewer than a quorum: then not even a free lock could have
// been taken.
func judgeAcquire(n, granted, failed int, elapsed, valid time.Duration) acquireVerdict {
	q := quorum(n)
	switch {
	case granted >= q && elapsed < valid:
		return verdictGranted
	case granted >= q:
		return verdictTooSlow
	case n-failed < q:
		return verdictNoQuorum
	}
	return verdictContention
}

// quorumFreeIn is how long until enough nodes could be free for a quorum,
// when need more nodes than are free now must expire and holders are the
// other owner's remaining times on the nodes it holds; 0 when unknown.
func quorumFreeIn(need int, holders []time.Duration) time.Duration {
	if need <= 0 || need > len(holders) {
		return 0
	}
	h := append([]time.Duration(nil), holders...)
	sort.Slice(h, func(i, j int) bool { return h[i] < h[j] })
	return h[need-1]
}

// quorumRemaining is how long a quorum of nodes still hold a key, given the
// key's remaining time on each node that holds it: the q-th longest.
func quorumRemaining(q int, ours []time.Duration) (time.Duration, bool) {
	if q <= 0 || len(ours) < q {
		return 0, false
	}
	h := append([]time.Duration(nil), ours...)
	sort.Slice(h, func(i, j int) bool { return h[i] > h[j] })
	return h[q-1], true
}

// attempt asks every node for the lock for owner, and gives back what it got
// unless a quorum granted it within the validity: validity = px − elapsed −
// drift, elapsed measured on the monotonic clock from before the first
// request. line is the waiting Lock's line, nil for TryLock: once an
// attempt of the line has failed, the nodes also say whether it has waited
// longest (acquireResult.next).
func (m *RedlockMutex) attempt(ctx context.Context, op, owner string, line *redlockEar) acquireResult {
	countAttempt(ctx, &m.cfg)
	r := m.r
	px := redlockPX(&m.cfg)
	valid := px - m.drift(px)
	start := time.Now()
	wait := min(redlockNodeTimeout(&m.cfg), valid)
	deadline := start.Add(wait)
	// A line is listed from its second attempt on: an uncontended Lock
	// costs the nodes nothing more than a TryLock.
	call, listed := protocol.RedlockAcquire(m.key, owner, px), false
	if line != nil {
		var waited time.Duration
		if waited, listed = line.waited(); listed {
			call = protocol.RedlockAcquireWaiting(m.key, m.linesKey, owner, px, line.id, waited)
		}
	}
	calls := m.nodeCalls(nil, call)
	// A free key is taken with a native SET NX PX, the script only when
	// the key exists (goredis.Driver.SetNX): a third less work per node.
	// Not while this process listens for the lock's releases on the node
	// (it waited for the lock within the subscription's linger): the key
	// is likely taken then, and the script answers a taken key in one
	// round trip where the SET would add one. Nor for a line the nodes
	// may list as waiting: only the script takes it off the list.
	setNX := func(ctx context.Context, i int, c *driver.Call) bool {
		return !listed && !r.nodes[i].notify.Confirmed(m.key) && r.nodes[i].drv.SetNX(ctx, c, m.key, owner, px)
	}
	replies, tail := r.fanoutFirst(ctx, deadline, calls, r.acquireDecided, setNX)
	elapsed := time.Since(start)

	var t acquireTally
	t.count(replies)
	verdict := judgeAcquire(len(r.nodes), t.granted, t.failed, elapsed, valid)
	if line != nil {
		line.attempted(verdict == verdictGranted)
	}
	hold := &redlockHold{m: m, tail: tail, replies: replies, deadline: deadline}
	if verdict == verdictGranted {
		// Nodes that had not answered when the quorum did are not failures
		// here: their errors are made only for an attempt that failed.
		return acquireResult{hold: hold, start: start, px: px}
	}
	// Not granted: give back our share on every node that may hold it. A
	// request the fan-out stopped waiting for may still reach its node long
	// after: the driver's batching sends pipelines without a deadline (one
	// waits for a node that is down until the node is back), and bytes may
	// be stuck in the network. So the give-back to such a node follows its
	// request's return (giveBack), lest the grant land after it and stay;
	// and while a give-back may still be on its way, the owner value is
	// spent: a Lock that goes on asks as another owner, since a late
	// give-back would delete the next attempt's share after its grant (a
	// lease that holds fewer nodes than it counts, and two holders). A call
	// whose ctx has ended never uses owner again: it returns at once, and
	// the giving back goes on in the background (Close waits for it).
	res := acquireResult{start: start}
	res.spent = !hold.giveBack(ctx, owner, t.release, t.grantedBy)
	if ctx.Err() != nil {
		return res
	}
	failed := r.attemptFailures(ctx, replies, wait)
	m.explainFailure(&res, op, verdict, &t, failed, elapsed, valid)
	return res
}

// acquireDecided reports whether an attempt's replies decide it: a quorum
// granted it (slower nodes finish in the background), or every node that
// answers has answered and they are a quorum: the silent nodes are not
// waited for then (redlock_silent.go).
func (r *Redlock) acquireDecided(replies []nodeReply) bool {
	q := quorum(len(r.nodes))
	granted, answered := 0, 0
	for _, rep := range replies {
		if rep.done {
			answered++
			if ok, _, err := readAcquire(rep); err == nil && ok {
				granted++
			}
		}
	}
	if granted >= q {
		return true
	}
	live, _ := r.unanswered(replies)
	return live == 0 && answered >= q
}

// acquireTally counts the replies to one attempt.
type acquireTally struct {
	granted   int
	failed    int // did not answer usably
	permanent int // answered with an error that retrying cannot fix
	holders   []time.Duration
	held      int    // the most nodes one other owner holds
	next      int    // nodes that say this line waited longest
	release   []bool // may hold our share: give it back
	grantedBy []bool
}

// count tallies an attempt's replies.
func (t *acquireTally) count(replies []nodeReply) {
	t.release = make([]bool, len(replies))
	t.grantedBy = make([]bool, len(replies))
	heldBy := make(map[string]int, 1) // nodes per other owner
	for i, rep := range replies {
		ok, held, err := readAcquire(rep)
		switch {
		case !rep.done || err != nil:
			t.failed++
			if errs.IsReply(err) {
				// The script raised the error before writing anything.
				if !errs.IsTransient(err) {
					t.permanent++
				}
			} else {
				t.release[i] = true // it may have been granted all the same
			}
		case ok:
			t.granted++
			t.release[i] = true
			t.grantedBy[i] = true
		default:
			t.holders = append(t.holders, held.TTL)
			heldBy[held.Holder]++
			if held.Next {
				t.next++
			}
		}
	}
	for holder, nodes := range heldBy {
		if holder != "" { // an older dlock's script names no owner
			t.held = max(t.held, nodes)
		}
	}
}

// attemptFailures describes the nodes of an attempt's replies that did not
// answer usably, within a node timeout of wait.
func (r *Redlock) attemptFailures(ctx context.Context, replies []nodeReply, wait time.Duration) nodeErrors {
	var failed nodeErrors
	for i, rep := range replies {
		_, _, err := readAcquire(rep)
		switch {
		case !rep.done && !rep.late: // left early: silent
			failed = append(failed, r.silentError(ctx, i))
		case !rep.done || err != nil:
			failed = append(failed, r.nodeError(ctx, i, rep.done, err, wait))
		}
	}
	return failed
}

// explainFailure sets res's error, and what a waiter needs to know, for an
// attempt that was not granted: verdict, judged on t after elapsed for a
// validity of valid, with the nodes that failed.
func (m *RedlockMutex) explainFailure(res *acquireResult, op string, verdict acquireVerdict, t *acquireTally, failed nodeErrors, elapsed, valid time.Duration) {
	n, q := len(m.r.nodes), quorum(len(m.r.nodes))
	switch verdict {
	case verdictTooSlow:
		res.err = errs.Errorf("dlock: %s %q: %w: a quorum (%d of %d nodes) granted it only after %v, past its validity of %v",
			op, m.name, ErrQuorum, t.granted, n, elapsed.Round(time.Millisecond), valid)
		if len(failed) > 0 {
			res.err = fmt.Errorf("%w; %w", res.err, failed)
		}
	case verdictNoQuorum:
		res.err = errs.Errorf("dlock: %s %q: %w: %d of %d answered, %d needed: %w",
			op, m.name, ErrQuorum, n-len(failed), n, q, failed)
		res.permanent = t.permanent > n-q
	default:
		res.holderTTL = quorumFreeIn(q-t.granted, t.holders)
		res.held = t.held
		res.next = 2*t.next > len(t.holders)
		res.err = &errs.NotObtainedError{Name: m.name, HolderTTL: res.holderTTL, Last: failed.orNil()}
	}
}

// readAcquire reads one node's reply to an attempt: rep.err, or what
// protocol.RedlockAcquireReply makes of a reply; nothing for a node that did not answer.
func readAcquire(rep nodeReply) (granted bool, held protocol.RedlockHeld, err error) {
	if !rep.done {
		return false, held, nil
	}
	if rep.err != nil {
		return false, held, rep.err
	}
	return protocol.RedlockAcquireReply(rep.reply)
}

// quorum is how many of n nodes must agree.
func quorum(n int) int { return n/2 + 1 }

// redlockDrift is Redlock's drift allowance for a hold of px: px × factor +
// 2ms (the Redlock paper's clock drift plus Redis's expiry resolution).
func redlockDrift(px time.Duration, factor float64) time.Duration {
	return time.Duration(float64(px)*factor) + 2*time.Millisecond
}

// redlockPX is the expiry a grant sets: the TTL, or the hold cap when that is
// shorter, in whole milliseconds as Redis takes it.
func redlockPX(cfg *config) time.Duration {
	px := cfg.ttl
	if cfg.maxHold > 0 && cfg.maxHold < px {
		px = cfg.maxHold
	}
	return px.Truncate(time.Millisecond)
}

// redlockNodeTimeout is the node timeout in force for cfg.
func redlockNodeTimeout(cfg *config) time.Duration {
	if cfg.nodeTimeout > 0 {
		return cfg.nodeTimeout
	}
	px := redlockPX(cfg)
	return defaultNodeTimeout(px, redlockDrift(px, cfg.driftFactor))
}
