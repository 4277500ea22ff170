package dlock

import "context"

// FairMutex is a mutex that grants strictly in arrival order: every waiter,
// each goroutine of a process included, keeps its own place in the lock's
// queue, ordered by when its first attempt reached Redis, and Unlock hands the
// lock to the first of them. A waiter that gives up leaves the queue at once;
// one that dies keeps its place only for its waiter lease (WithWaiterLease),
// and stalls the queue for at most a claim window if its turn comes.
//
// A FairMutex is the same lock as the Mutex of the same name: use either, or
// both. The order is strict only while FairMutexes alone lock the name, since
// a Mutex may pass the lock to its own Client's goroutines ahead of the queue
// (docs/waiting.md). Get one from Client.FairMutex; it is an immutable
// descriptor, safe for concurrent use.
type FairMutex struct {
	m *Mutex
}

// FairMutex returns the fair lock called name. opts override the Client's
// defaults. It sends nothing and never fails: an invalid name or option is
// reported by the first TryLock or Lock.
func (c *Client) FairMutex(name string, opts ...Option) *FairMutex {
	// Small enough to inline, so that a FairMutex made per call can stay
	// on its caller's stack.
	return &FairMutex{m: c.newFairMutex(name, opts)}
}

// newFairMutex is FairMutex's lock: a Mutex with c's grant channel.
func (c *Client) newFairMutex(name string, opts []Option) *Mutex {
	m := &Mutex{c: c, name: name}
	m.err = c.lockConfig(&m.cfg, "FairMutex", name, opts)
	var grants string
	m.keys, grants = newFairKeys(m.cfg.keyPrefix, name, c.grantTag)
	c.makeFair(m, grants)
	return m
}

// grantTagLen is the length of a Client's grantTag: random hex, so that
// two Clients rarely share one (if they do, each only hears the other's
// grants too, as every Client hears a Mutex's).
const grantTagLen = 8

// makeFair makes m strict in order, with its waiters heard on grants, c's
// grant channel for m's lock: its timings argument names the channel's
// tag, which mutex_acquire.lua stores in the waiter's queue entry and the
// grant that serves the entry publishes on (lock_lib.lua). A grant then
// wakes the one Client it is for, not every Client that waits for the lock
// (docs/waiting.md).
func (c *Client) makeFair(m *Mutex, grants string) {
	m.grants = grants
	if m.cfg.timings == c.cfg.timings {
		m.cfg.timings = c.fairTimings // the Client's: nothing to format
	} else {
		m.cfg.timings = tagTimings(c.grantTag, m.cfg.timings)
	}
}

// tagTimings is the Mutex scripts' timings argument with a grant channel's
// tag in front ("g<tag> <timings>"; the channel is the lock key, ":g" and
// the tag).
func tagTimings(tag, timings string) string { return "g" + tag + " " + timings }

// Name returns the lock's name.
func (f *FairMutex) Name() string { return f.m.name }

// TryLock takes the lock if it is free and nobody is queued for it, in one
// round trip; otherwise it returns an error matching ErrNotObtained. Other
// errors are those of Mutex.TryLock.
func (f *FairMutex) TryLock(ctx context.Context) (*Lease, error) { return f.m.TryLock(ctx) }

// Lock joins the end of the queue and waits for its turn, as long as ctx
// allows; see Mutex.Lock for the errors. The caller must Unlock the
// returned Lease.
func (f *FairMutex) Lock(ctx context.Context) (*Lease, error) {
	if f.m.err != nil {
		return nil, f.m.err
	}
	ctx, cancel := f.m.cfg.boundWait(ctx)
	defer cancel()
	return f.m.c.acquire(ctx, f.m, &f.m.cfg, true)
}
