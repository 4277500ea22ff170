package driverkit

import (
	"context"
	"strings"
	"sync"

	"github.com/dlock-go/dlock/driver"
)

// send sends one caller's calls (Dispatch); sendShared sends a pipeline
// that the batcher gathered for several callers, on a context of its own
// (batch.go), which Lib.Sent learns.
func (d *Driver[C]) send(ctx context.Context, calls []*driver.Call) { d.run(ctx, calls, false) }

func (d *Driver[C]) sendShared(ctx context.Context, calls []*driver.Call) {
	d.run(ctx, calls, true)
}

// run sends calls: a lone call without a pipeline, the fast path of a lone
// lock operation; several in one pipeline per group (groupOf), the groups
// at once.
func (d *Driver[C]) run(ctx context.Context, calls []*driver.Call, shared bool) {
	if len(calls) == 1 && calls[0].Replicas <= 0 {
		c := calls[0]
		ran := d.runOne(ctx, c)
		if c.Err != nil && d.lib.Sent != nil {
			d.lib.Sent(ctx, calls, []int32{ran}, shared)
		}
		return
	}
	first := d.groupOf(calls[0])
	same := true
	for _, c := range calls[1:] {
		same = same && d.groupOf(c) == first
	}
	if same {
		d.runGroup(ctx, first.kind, calls, shared)
		return
	}
	var (
		keys   []group
		groups [][]*driver.Call
	)
	for _, c := range calls {
		g := d.groupOf(c)
		i := 0
		for i < len(keys) && keys[i] != g {
			i++
		}
		if i == len(keys) {
			keys, groups = append(keys, g), append(groups, nil)
		}
		groups[i] = append(groups[i], c)
	}
	var wg sync.WaitGroup
	for i := 1; i < len(groups); i++ {
		i := i
		wg.Add(1)
		d.workers.Go(func() {
			defer wg.Done()
			d.runGroup(ctx, keys[i].kind, groups[i], shared)
		})
	}
	d.runGroup(ctx, keys[0].kind, groups[0], shared)
	wg.Wait()
}

// group is what calls must share to go in one pipeline.
type group struct {
	kind groupKind
	tag  string // the hash tag of a dedicated group on a Cluster
}

type groupKind int

const (
	pipelined  groupKind = iota // one DoMulti; WAITs follow their scripts in it when Lib.Dedicated is nil
	keyless                     // on a Cluster, calls without keys: a DoMulti of their own
	dedicated                   // calls with WAIT through Lib.Dedicated, one per hash tag on a Cluster
	replicated                  // calls with WAIT through Lib.Replicated
)

// groupOf returns c's group. A call with WAIT must have its WAIT on the
// connection that ran its script, which only a Lib.Dedicated connection (or
// Lib.Replicated) promises when the library multiplexes its connections.
// A Cluster pipeline may not mix commands without a slot with commands for
// several slots.
func (d *Driver[C]) groupOf(c *driver.Call) group {
	switch {
	case c.Replicas > 0 && d.lib.Replicated != nil:
		return group{kind: replicated}
	case c.Replicas > 0 && d.lib.Dedicated != nil:
		if d.lib.Cluster && len(c.Keys) > 0 {
			return group{kind: dedicated, tag: hashTag(c.Keys[0])}
		}
		return group{kind: dedicated}
	case d.lib.Cluster && len(c.Keys) == 0:
		return group{kind: keyless}
	}
	return group{kind: pipelined}
}

// runGroup sends calls of one group.
func (d *Driver[C]) runGroup(ctx context.Context, kind groupKind, calls []*driver.Call, shared bool) {
	switch kind {
	case replicated:
		d.lib.Replicated(ctx, calls)
	case dedicated:
		// The library takes a dedicated connection out of its pool without
		// a context: when it has to dial one, a silent server holds it for
		// the dial timeout. So Run may leave the batch at ctx's end.
		runBounded(d.workers, ctx, calls, func(ctx context.Context, calls []*driver.Call) {
			d.lib.Dedicated(func(doMulti DoMultiFunc[C]) { d.Pipeline(ctx, doMulti, calls, nil) })
		})
	default:
		var small [16]int32 // the common batch: no allocation for the counts
		var ran []int32
		if len(calls) <= len(small) {
			ran = small[:len(calls)]
		} else {
			ran = make([]int32, len(calls))
		}
		d.Pipeline(ctx, d.lib.DoMulti, calls, ran)
		if d.lib.Sent != nil && anyFailed(calls) {
			d.lib.Sent(ctx, calls, append([]int32(nil), ran...), shared)
		}
	}
}

func anyFailed(calls []*driver.Call) bool {
	for _, c := range calls {
		if c.Err != nil {
			return true
		}
	}
	return false
}

// SendAgain sends calls without WAIT once more, as Run's direct path does
// but without batching or Lib.Sent: for a Lib.Sent that resends calls
// which cannot have run.
func (d *Driver[C]) SendAgain(ctx context.Context, calls []*driver.Call) {
	if len(calls) == 1 {
		d.runOne(ctx, calls[0])
		return
	}
	d.Pipeline(ctx, d.lib.DoMulti, calls, nil)
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

// runOne sends one call without WAIT: EVALSHA, and EVAL only when the
// server lost the script. It returns how many times the script may have
// run (MayHaveRun).
func (d *Driver[C]) runOne(ctx context.Context, c *driver.Call) (ran int32) {
	for resends := 0; ; {
		cmd := d.lib.EvalSha(c)
		r := d.lib.Do(ctx, cmd)
		d.release(cmd)
		ran += MayHaveRun(r.Writes, r.Err)
		if isNoScript(r.Err) {
			cmd = d.lib.Eval(c)
			r = d.lib.Do(ctx, cmd)
			d.release(cmd)
			ran += MayHaveRun(r.Writes, r.Err)
		}
		if d.redial(ctx, &resends, r.Err) {
			continue
		}
		c.Reply, c.Err = r.Reply, r.Err
		c.Resent = ran > 1
		return ran
	}
}

func (d *Driver[C]) release(cmd C) {
	if d.lib.Release != nil {
		d.lib.Release(cmd)
	}
}
