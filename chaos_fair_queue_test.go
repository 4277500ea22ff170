//go:build linux

package dlock_test

import (
	"context"
	"math/rand"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/chaos"
	"github.com/dlock-go/dlock/internal/redistest"
)

// How a fairQueue's waiter runs.
const (
	inProcess = iota
	behindProxy
	childProcess
)

// fairQueue is one FairMutex queue under test: a holder in this process,
// and waiters, each a chaos worker of one section (in this process, behind
// a proxy of its own, or a child process), queued one after the other so
// that their arrival order in Redis is known.
type fairQueue struct {
	t    *testing.T
	srv  *redistest.Server
	name string
	rec  *chaos.Recorder
	r    *rand.Rand
	spec chaosSpec // the waiters' common spec

	release    chan struct{} // ends the holder's section
	holderDone chan error
	waiters    []*fairWaiter
}

// fairWaiter is one waiter of a fairQueue.
type fairWaiter struct {
	proc   string
	child  *chaosChild        // a child process, or nil
	proxy  *redistest.Proxy   // in-process behind a proxy, or nil
	cancel context.CancelFunc // in-process: ends its wait
	done   chan error         // in-process: its worker's result
	leased chan struct{}      // in-process: closed when granted
}

// newFairQueue takes lock name for a holder whose section lasts until
// release (or, with holder.NoRenew and StopOnLoss, until its lease ends),
// with spec's TTL and waiter lease unless holder sets its own.
func newFairQueue(t *testing.T, srv *redistest.Server, rec *chaos.Recorder, r *rand.Rand, name string, spec, holder chaosSpec) *fairQueue {
	t.Helper()
	spec.Kind, spec.Locks, spec.Addrs, spec.StoreAddr, spec.Sections = "fair", []string{name}, []string{srv.Addr()}, srv.Addr(), 1
	q := &fairQueue{t: t, srv: srv, name: name, rec: rec, r: r, spec: spec, release: make(chan struct{}), holderDone: make(chan error, 1)}
	h := spec
	h.Proc, h.Hold, h.Beat, h.Seed, h.until = "holder", time.Minute, time.Millisecond, r.Int63(), q.release
	h.NoRenew, h.StopOnLoss = holder.NoRenew, holder.StopOnLoss
	if holder.TTL > 0 {
		h.TTL = holder.TTL
	}
	leased := make(chan struct{})
	h.onLease = func(*dlock.Lease) { close(leased) }
	go func() { q.holderDone <- runChaosWorker(testCtx(t), h, rec) }()
	select {
	case <-leased:
	case err := <-q.holderDone:
		t.Fatalf("holder: %v", err)
	}
	return q
}

// add queues a waiter called proc, run as how says, and returns once it is
// in the queue, behind every waiter added before it.
func (q *fairQueue) add(proc string, how int) *fairWaiter {
	q.t.Helper()
	s := q.spec
	s.Proc, s.Seed = proc, q.r.Int63()
	w := &fairWaiter{proc: proc}
	switch how {
	case childProcess:
		w.child = startChaosChild(q.t, s, q.rec)
	default:
		if how == behindProxy {
			w.proxy = redistest.StartProxy(q.t, q.srv.Addr())
			// A connection the proxy cut off is given up on sooner.
			s.Addrs, s.ReadTimeout = []string{w.proxy.Addr()}, 500*time.Millisecond
		}
		var ctx context.Context
		ctx, w.cancel = context.WithCancel(testCtx(q.t))
		w.done, w.leased = make(chan error, 1), make(chan struct{})
		s.onLease = func(*dlock.Lease) { close(w.leased) }
		go func() { w.done <- runChaosWorker(ctx, s, q.rec) }()
	}
	q.waiters = append(q.waiters, w)
	waitQueued(q.t, q.srv, q.name, int64(len(q.waiters)))
	return w
}

// unlock ends the holder's section: it releases the lock.
func (q *fairQueue) unlock() { close(q.release) }

// finish waits for the holder and every waiter that was not killed.
func (q *fairQueue) finish() {
	q.t.Helper()
	for _, w := range q.waiters {
		switch {
		case w.child != nil:
			select {
			case <-w.child.done:
				if w.child.err != nil && w.child.cmd.ProcessState.Success() {
					q.t.Errorf("worker %s: %v", w.proc, w.child.err)
				}
			case <-time.After(time.Minute):
				q.t.Fatalf("worker %s still running", w.proc)
			}
		default:
			if err := <-w.done; err != nil {
				q.t.Errorf("worker %s: %v", w.proc, err)
			}
			w.cancel()
		}
	}
	if err := <-q.holderDone; err != nil {
		q.t.Errorf("holder: %v", err)
	}
}

// fairOutcome is what a fairQueue's history shows.
type fairOutcome struct {
	order []string // the procs granted the lock, holder first, in grant order
	owner []string // their owner values
	// stall is the longest time from a holder's end (its Unlock called, or
	// its loss seen) to the next grant's return.
	stall time.Duration
}

// fairOutcomeOf reads the grants of lock name from h. A grant to a proc in
// exempt (a faulty waiter, back after the others were served) ends no
// stall: nobody else waited.
func fairOutcomeOf(h chaos.History, name string, exempt ...string) fairOutcome {
	var acqs []chaos.Event
	end := map[string]int64{}
	for _, e := range h {
		if e.Lock != name {
			continue
		}
		switch {
		case e.Kind == chaos.Acquire && e.OK:
			acqs = append(acqs, e)
		case e.Kind == chaos.Release:
			if t, ok := end[e.Hold]; !ok || e.T0 < t {
				end[e.Hold] = e.T0
			}
		case e.Kind == chaos.Lost:
			if t, ok := end[e.Hold]; !ok || e.T < t {
				end[e.Hold] = e.T
			}
		}
	}
	sort.Slice(acqs, func(i, j int) bool { return acqs[i].T < acqs[j].T })
	var o fairOutcome
	for i, a := range acqs {
		o.order = append(o.order, a.Proc)
		o.owner = append(o.owner, a.Owner)
		if i == 0 || len(without([]string{a.Proc}, exempt...)) == 0 {
			continue
		}
		if t, ok := end[acqs[i-1].Hold]; ok && a.T-t > int64(o.stall) {
			o.stall = time.Duration(a.T - t)
		}
	}
	return o
}

// without returns order less the procs in drop.
func without(order []string, drop ...string) []string {
	var out []string
	for _, p := range order {
		keep := true
		for _, d := range drop {
			keep = keep && p != d
		}
		if keep {
			out = append(out, p)
		}
	}
	return out
}

// procsOf returns the owner infos (procs) of owner values.
func procsOf(owners []string) []string {
	var out []string
	for _, o := range owners {
		_, p, _ := strings.Cut(o, ";")
		out = append(out, p)
	}
	return out
}
