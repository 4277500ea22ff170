package dlock

import "context"

// FairMutex is a mutex that grants strictly in arrival order: every waiter,
// including each of several goroutines of one process, keeps its own place
// in the lock's queue, ordered by when its first attempt reached Redis (on
// the server's clock; Lock calls that overlap arrive in whatever order
// Redis receives them), and Unlock hands the lock to the first of them.
// Only the head waiter is woken by a release.
//
// A waiter that gives up leaves the queue at once. One that dies, or stops
// answering (a paused process, a connection cut off), keeps its place only
// for its waiter lease (WithWaiterLease). If its turn comes meanwhile, the
// lock is handed to it for a claim window (its TTL or its waiter lease,
// whichever is shorter) and then goes on to the next waiter: a dead waiter
// stalls the queue for at most that window. A waiter that comes back after
// its lease ran out, or after its turn passed unclaimed, queues again at
// the back. A Redis that restarts without persistence forgets the queue:
// the waiters queue again as they poll, in no promised order.
//
// A FairMutex is the same lock as the Mutex of the same name (same keys,
// same scripts): use either, or both, on a name. The difference is in how a
// Client's goroutines wait: a Mutex queues them locally behind one shared
// place in Redis and may hand the lock from one of them to the next (the
// queue in Redis is then served at least every 8th grant), a FairMutex
// gives each its own place (global arrival order), at the cost of one queue
// entry per waiting goroutine; a Client renews the entries of its waiting
// goroutines together, in one call every third of the claim window.
// So the order is strict only while FairMutexes alone lock the name: a
// Mutex's Unlock may pass the lock to its own Client's goroutines ahead of
// the queue, and a Mutex may take the lock ahead of the queue once a holder
// that died without releasing it has expired. Get one from
// Client.FairMutex; it is an immutable descriptor, safe for concurrent use.
type FairMutex struct {
	m *Mutex
}

// FairMutex returns the fair lock called name. opts override the Client's
// defaults. It sends nothing and never fails: an invalid name or option is
// reported by the first TryLock or Lock.
func (c *Client) FairMutex(name string, opts ...Option) *FairMutex {
	m := c.newMutex("FairMutex", name, opts)
	m.fair = true
	return &FairMutex{m: m}
}

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
	return f.m.c.acquire(ctx, f.m, &f.m.cfg, true)
}
