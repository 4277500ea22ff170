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

// Run implements driver.Driver.
//
// Calls without Replicas share one pipeline (split per node on a Cluster),
// the way the library pipelines anything. A call with Replicas must have its
// WAIT on the connection that ran its script, which the library's shared,
// multiplexed connections cannot promise, so such calls go through
// Lib.Dedicated: all of them on one connection, or on a Cluster one
// connection per hash tag (and so per slot). The batches run concurrently;
// each is one round trip, plus one for the calls that met NOSCRIPT.
func (d *Driver[C]) Run(ctx context.Context, calls ...*driver.Call) {
	defer func() {
		for _, c := range calls {
			settleDeadline(ctx, c.Err)
		}
	}()
	switch {
	case len(calls) == 0:
	case len(calls) == 1 && calls[0].Replicas <= 0:
		d.runOne(ctx, calls[0])
	default:
		batches := d.batches(calls)
		var wg sync.WaitGroup
		for _, b := range batches[1:] {
			wg.Add(1)
			go func(b batch) {
				defer wg.Done()
				d.runBatch(ctx, b)
			}(b)
		}
		d.runBatch(ctx, batches[0])
		wg.Wait()
	}
}

// batch is a set of calls sent together.
type batch struct {
	calls     []*driver.Call
	dedicated bool // on one connection of its own, each script followed by its WAIT
}

// batches splits calls into the batches Run sends.
func (d *Driver[C]) batches(calls []*driver.Call) []batch {
	var plain, keyless []*driver.Call
	var replicated [][]*driver.Call
	slotOf := map[string]int{} // hash tag -> index in replicated
	for _, c := range calls {
		switch {
		case c.Replicas > 0:
			tag := ""
			if d.lib.Cluster && len(c.Keys) > 0 {
				tag = hashTag(c.Keys[0])
			}
			i, ok := slotOf[tag]
			if !ok {
				i = len(replicated)
				slotOf[tag] = i
				replicated = append(replicated, nil)
			}
			replicated[i] = append(replicated[i], c)
		case d.lib.Cluster && len(c.Keys) == 0:
			// A Cluster pipeline may not mix commands without a slot with
			// commands for several slots.
			keyless = append(keyless, c)
		default:
			plain = append(plain, c)
		}
	}
	var out []batch
	for _, cs := range [][]*driver.Call{plain, keyless} {
		if len(cs) > 0 {
			out = append(out, batch{calls: cs})
		}
	}
	for _, cs := range replicated {
		out = append(out, batch{calls: cs, dedicated: true})
	}
	return out
}

// hashTag returns the part of key that decides its Cluster slot: the text
// between the first '{' and the next '}' when not empty, else the whole key.
// Keys with the same hash tag are in the same slot.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// runOne sends one call without Replicas: EVALSHA, and EVAL only when the
// server lost the script. The fast path of a lone lock operation.
func (d *Driver[C]) runOne(ctx context.Context, c *driver.Call) {
	for resends := 0; ; resends++ {
		r := d.lib.Do(ctx, d.lib.EvalSha(c))
		if isNoScript(r.Err) {
			r = d.lib.Do(ctx, d.lib.Eval(c))
		}
		if resends < maxDialResends && dialCancelledByOther(ctx, r.Err) {
			continue
		}
		c.Reply, c.Err = r.Reply, r.Err
		return
	}
}

// maxDialResends bounds how many times a call is sent again after its
// connection's dial was cancelled by another caller (dialCancelledByOther).
// Many callers whose contexts end at about the same time (a burst of
// timeouts) cancel dial after dial: three sends in all failed a few calls in
// a few hundred so in the conformance suite. Each send waits for a dial, so
// the bound only keeps a call from trying for ever while other callers keep
// giving up.
const maxDialResends = 10

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

// runBatch sends a batch's calls with EVALSHA, then again with EVAL those
// that met NOSCRIPT.
func (d *Driver[C]) runBatch(ctx context.Context, b batch) {
	if !b.dedicated {
		d.send(ctx, d.lib.DoMulti, b.calls, false)
		return
	}
	// The library takes a dedicated connection out of its pool without a
	// context: when it has to dial one, a silent server holds it for the
	// dial timeout. So the batch runs in a goroutine of the driver's, on
	// copies of the calls, and Run returns when ctx ends; Close waits for it.
	d.bg.runBounded(ctx, b.calls, func(ctx context.Context, calls []*driver.Call) {
		d.lib.Dedicated(func(doMulti DoMultiFunc[C]) {
			d.send(ctx, doMulti, calls, true)
		})
	})
}

// background tracks dedicated batches still running after Run gave up on
// them at its context's end.
type background struct {
	mu      sync.Mutex
	closing bool
	wg      sync.WaitGroup
}

// runBounded runs calls with run and returns when they are done or ctx
// ends; every call then has an outcome, ctx's error for those not done.
func (b *background) runBounded(ctx context.Context, calls []*driver.Call, run func(context.Context, []*driver.Call)) {
	b.mu.Lock()
	if b.closing || ctx.Done() == nil {
		b.mu.Unlock()
		run(ctx, calls)
		return
	}
	b.wg.Add(1)
	b.mu.Unlock()

	copies := make([]*driver.Call, len(calls))
	for i, c := range calls {
		cc := *c
		copies[i] = &cc
	}
	done := make(chan struct{})
	go func() {
		defer b.wg.Done()
		defer close(done)
		run(ctx, copies)
	}()
	select {
	case <-done:
		for i, c := range calls {
			*c = *copies[i]
		}
	case <-ctx.Done():
		for _, c := range calls {
			c.Reply, c.Acked, c.Err = nil, 0, ctx.Err()
		}
	}
}

// wait waits for abandoned batches; afterwards batches run in the caller.
func (b *background) wait() {
	b.mu.Lock()
	b.closing = true
	b.mu.Unlock()
	b.wg.Wait()
}

// send runs calls through doMulti, each followed by its WAIT when withWait:
// with EVALSHA, then with EVAL those that met NOSCRIPT; a call whose dial
// another caller cancelled is sent again, up to maxDialResends times.
func (d *Driver[C]) send(ctx context.Context, doMulti DoMultiFunc[C], calls []*driver.Call, withWait bool) {
	type sending struct {
		c       *driver.Call
		eval    bool
		resends int // after dials that other callers cancelled
	}
	pending := make([]sending, len(calls))
	for i, c := range calls {
		pending[i] = sending{c: c}
	}
	for len(pending) > 0 {
		cmds := make([]C, 0, 2*len(pending))
		for _, p := range pending {
			if p.eval {
				cmds = append(cmds, d.lib.Eval(p.c))
			} else {
				cmds = append(cmds, d.lib.EvalSha(p.c))
			}
			if withWait {
				cmds = append(cmds, d.lib.Wait(p.c))
			}
		}
		results := doMulti(ctx, cmds...)
		var again []sending
		for i, p := range pending {
			r := results[i]
			if withWait {
				r = results[2*i]
			}
			switch {
			case !p.eval && isNoScript(r.Err):
				p.eval = true
				again = append(again, p)
				continue
			case p.resends < maxDialResends && dialCancelledByOther(ctx, r.Err):
				p.resends++
				again = append(again, p)
				continue
			}
			c := p.c
			c.Reply, c.Err, c.Acked = r.Reply, r.Err, 0
			if withWait && c.Err == nil {
				c.Acked, c.Err = acked(results[2*i+1])
			}
		}
		pending = again
	}
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

// settleDeadline waits, when err says that ctx's deadline passed, until ctx
// says so too. rueidis turns ctx's deadline into the connection's, whose
// timeout can fire a moment before ctx's own timer; callers that find
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
	rerr, ok := err.(*driver.ReplyError)
	return ok && strings.HasPrefix(rerr.Msg, "NOSCRIPT")
}
