package driverkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// sending is one call on its way through Pipeline.
type sending struct {
	i       int  // the call's index
	eval    bool // the server lacked the script: EVAL
	resends int  // after dials that other callers cancelled
}

// scratch is Pipeline's lists, reused from pipeline to pipeline: with the
// batcher, a pipeline is most calls' only cost beyond their own command.
type scratch[C any] struct {
	pending, again []sending
	cmds           []C
	results        []Result
}

type scratchPool[C any] struct{ p sync.Pool }

func (sp *scratchPool[C]) get() *scratch[C] {
	if v := sp.p.Get(); v != nil {
		return v.(*scratch[C])
	}
	return new(scratch[C])
}

func (sp *scratchPool[C]) put(sc *scratch[C]) {
	clear(sc.cmds[:cap(sc.cmds)]) // drop references to sent commands and replies
	clear(sc.results[:cap(sc.results)])
	sp.p.Put(sc)
}

// Pipeline sends calls through doMulti, each script followed by its WAIT
// when the call asks for one (Replicas), so doMulti must keep a pipeline on
// one connection for those: EVALSHA first, then EVAL for the calls the
// server answered NOSCRIPT (after SCRIPT FLUSH, a restart or a failover);
// with Lib.SharedDial, a call whose connection another caller's context
// failed is sent again. It adds to ran[i], when ran is not nil, how often
// calls[i]'s script may have run, and sets each call's Resent from it.
func (d *Driver[C]) Pipeline(ctx context.Context, doMulti DoMultiFunc[C], calls []*driver.Call, ran []int32) {
	var small [16]int32
	switch {
	case ran != nil:
	case len(calls) <= len(small):
		ran = small[:len(calls)]
	default:
		ran = make([]int32, len(calls))
	}
	sc := d.scratch.get()
	pending, again := sc.pending[:0], sc.again[:0]
	for i := range calls {
		pending = append(pending, sending{i: i})
	}
	for len(pending) > 0 {
		cmds := sc.cmds[:0]
		for _, p := range pending {
			c := calls[p.i]
			if p.eval {
				cmds = append(cmds, d.lib.Eval(c))
			} else {
				cmds = append(cmds, d.lib.EvalSha(c))
			}
			if c.Replicas > 0 {
				cmds = append(cmds, d.lib.Wait(c))
			}
		}
		results := sc.results[:0]
		for range cmds {
			results = append(results, Result{})
		}
		doMulti(ctx, cmds, results)
		sc.cmds, sc.results = cmds, results
		again = again[:0]
		j := 0
		for _, p := range pending {
			c := calls[p.i]
			r := results[j]
			d.release(cmds[j])
			var wait *Result
			if c.Replicas > 0 {
				wait = &results[j+1]
				d.release(cmds[j+1])
				j++
			}
			j++
			ran[p.i] += MayHaveRun(r.Writes, r.Err)
			switch {
			case !p.eval && isNoScript(r.Err):
				p.eval = true
				again = append(again, p)
				continue
			case d.redial(ctx, &p.resends, r.Err):
				again = append(again, p)
				continue
			}
			c.Reply, c.Err, c.Acked = r.Reply, r.Err, 0
			c.Resent = ran[p.i] > 1
			if wait != nil && c.Err == nil {
				c.Acked, c.Err = acked(*wait)
			}
		}
		pending, again = again, pending
	}
	sc.pending, sc.again = pending, again
	d.scratch.put(sc)
}

// acked reads WAIT's reply: the number of replicas that acknowledged.
func acked(r Result) (int, error) {
	if r.Err != nil {
		return 0, r.Err
	}
	n, ok := r.Reply.(int64)
	if !ok {
		return 0, fmt.Errorf("dlock: unexpected reply to WAIT: %#v", r.Reply)
	}
	return int(n), nil
}

// maxDialResends bounds how many times a call is sent again after its
// connection's dial was cancelled by another caller (dialCancelledByOther).
// Many callers whose contexts end at about the same time (a burst of
// timeouts) cancel dial after dial: three sends in all failed a few calls in
// a few hundred so in the conformance suite. Each send waits for a dial, so
// the bound only keeps a call from trying for ever while other callers keep
// giving up.
const maxDialResends = 10

// redial reports, for a library with Lib.SharedDial, whether a call that
// failed with err is to be sent again, counting it in resends.
func (d *Driver[C]) redial(ctx context.Context, resends *int, err error) bool {
	if !d.lib.SharedDial || *resends >= maxDialResends || !dialCancelledByOther(ctx, err) {
		return false
	}
	*resends++
	return true
}

// dialCancelledByOther reports whether err is the failure of a connection
// set-up that another caller's context cancelled while ctx is still live.
// The library dials a shared connection, and sends its handshake (HELLO,
// CLIENT SETINFO), with the context of the call that needed it first, and
// fails every call queued on it when that context ends: with the dial's
// error, or with the bare context error of the handshake. Nothing of the
// call was sent, so it is safe to send again. A context error cannot be the
// call's own, since ctx is live; a read or write that fails with one
// belongs to a connection in use, and is not taken for a set-up.
func dialCancelledByOther(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil ||
		!(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Op == "dial"
	}
	return true
}

// settleDeadline waits, when err says that ctx's deadline passed, until ctx
// says so too. A library may turn ctx's deadline into the connection's,
// whose timeout can fire a moment before ctx's own timer; callers that find
// ctx.Err() still nil would take the deadline for a failure of Redis.
func settleDeadline(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
		return
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		<-ctx.Done() // closes as soon as ctx's timer runs
	}
}

func isNoScript(err error) bool {
	msg, ok := replyMsg(err)
	return ok && strings.HasPrefix(msg, "NOSCRIPT")
}

// replyMsg returns the message of an error reply, without a leading "ERR "
// (rueidis drops it, go-redis keeps it); false for any other error.
func replyMsg(err error) (string, bool) {
	if err == nil {
		return "", false // before rerr, which errors.As moves to the heap
	}
	var rerr *driver.ReplyError
	if !errors.As(err, &rerr) {
		return "", false
	}
	return strings.TrimPrefix(rerr.Msg, "ERR "), true
}

// RefusedBeforeRun reports whether err is a reply by which the server
// refuses a command without running it.
func RefusedBeforeRun(err error) bool {
	msg, ok := replyMsg(err)
	if !ok {
		return false
	}
	for _, prefix := range []string{"READONLY", "CLUSTERDOWN", "MASTERDOWN", "LOADING", "TRYAGAIN", "NOSCRIPT", "MOVED", "ASK"} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

// MayHaveRun is how many times a sending may have run its script on a
// server: the library wrote it writes times, and the last write was refused
// when err says so.
func MayHaveRun(writes int32, err error) int32 {
	if writes > 0 && err != nil && RefusedBeforeRun(err) {
		return writes - 1
	}
	return writes
}
