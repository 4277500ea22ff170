package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/wait"
)

// Mutex is a distributed mutual-exclusion lock: at most one Lease holds it
// at a time, across every process that uses the same name on the same Redis.
// Get one from Client.Mutex; it is an immutable descriptor, safe for
// concurrent use, and cheap to create per call.
//
// Waiters are served in arrival order and handed the lock by the release,
// without polling. Goroutines of one Client share one place in the queue
// and hand the lock to each other directly, a bounded number of times in a
// row before the queue in Redis is served (docs/waiting.md has the rule and
// why); FairMutex serves every waiter in strict order instead.
//
// A Mutex is not reentrant: a Lock by whoever already holds it waits like
// any other; use a ReentrantMutex for that.
type Mutex struct {
	c    *Client
	name string
	cfg  config
	keys lockKeys
	err  error // invalid name or option, reported by TryLock and Lock
	// grants is set for a FairMutex (strict order: a free lock never goes
	// past a queued waiter) and an Election: the channel on which its
	// waiters of this Client hear their grants (fair.go). Empty for a
	// Mutex, whose waiters hear them on the lock's key.
	grants string
}

var (
	_ queuedLock   = (*Mutex)(nil)
	_ batchRenewer = (*Mutex)(nil)
	_ recorder     = (*Mutex)(nil)
)

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.name }

// TryLock makes one attempt to take the lock, in one round trip. It returns
// an error matching ErrNotObtained when another owner holds it (or owners
// queued for it first), ErrInvalidArgument for an invalid name or option,
// ErrKeyConflict when the key holds something dlock did not write, and
// ErrClosed after Client.Close. The caller must Unlock the returned Lease.
func (m *Mutex) TryLock(ctx context.Context) (*Lease, error) {
	if m.err != nil {
		return nil, m.err
	}
	return m.c.acquire(ctx, m, &m.cfg, false)
}

// Lock takes the lock, waiting as long as ctx allows. When ctx ends first,
// the error matches both ErrNotObtained and ctx's error, and the waiter has
// left the queue. Failures to reach Redis are retried while ctx allows (the
// last one is part of the final error); other errors are returned at once:
// ErrInvalidArgument, ErrKeyConflict, ErrClosed, and a closed Redis client
// (driver.ErrClientClosed). The caller must Unlock the returned Lease.
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) {
	if m.err != nil {
		return nil, m.err
	}
	ctx, cancel := m.cfg.boundWait(ctx)
	defer cancel()
	if m.cfg.wait.spin {
		return m.c.acquire(ctx, m, &m.cfg, true)
	}
	if m.cfg.observer != nil {
		// Observed whatever the outcome, a closed Client or an ended ctx
		// too, as TryLock and every other acquire are.
		return observeAcquire(ctx, &m.cfg, KindMutex, m.name, "Lock", m.lock)
	}
	return m.lock(ctx)
}

// lock is Lock after its options are checked: the shared wait of the
// Client's callers for this lock (Client.lockShared).
func (m *Mutex) lock(ctx context.Context) (*Lease, error) {
	if err := m.c.checkOpen("Lock", m.name); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, errs.WaitEnded(ctx, m.name, time.Now(), 0, nil)
	}
	return m.c.lockShared(ctx, m)
}

func (m *Mutex) lockName() string { return m.name }

func (m *Mutex) kind() Kind { return KindMutex }

func (m *Mutex) channel() string {
	if m.grants != "" {
		return m.grants
	}
	return m.keys.channel()
}

// fair reports whether m grants in strict arrival order.
func (m *Mutex) fair() bool { return m.grants != "" }

// place serves a FairMutex's waiters, and a MultiLock's, each with a place
// of its own (a Mutex's share one: mutex_wait.go).
func (m *Mutex) place(owner string) wait.Place {
	return wait.Place{Queue: m.keys.queue, Waiters: m.keys.waiters, Member: owner, Lock: m.keys.lock}
}

// flagNewOwner is Mutex.acquire's join for an owner value never queued
// before (protocol.JoinNew).
var flagNewOwner = protocol.JoinNew

// mode is the Mutex scripts' mode argument for this lock and driver.
func (m *Mutex) mode() any { return protocol.LockMode(m.c.drv, m.fair()) }

func (m *Mutex) attempt(ctx context.Context, owner string, queue bool) (wait.Result, error) {
	return m.acquire(ctx, owner, protocol.Join(queue))
}

// acquire runs mutex_acquire.lua; join is its ARGV[3]: protocol.Join's or
// flagNewOwner.
func (m *Mutex) acquire(ctx context.Context, owner string, join any) (wait.Result, error) {
	a, err := protocol.MutexAcquire(ctx, m.c.drv, m.keys.array(), owner, &m.cfg.pxMillis, join, m.mode(), &m.cfg.timings, m.cfg.ack())
	if err != nil {
		return wait.Result{}, err
	}
	return grantAcked(ctx, m, &m.cfg, owner, a)
}

// unlock is Unlock's release: straight to a goroutine of this Client
// that waits for the lock when the local hand-off allows it (mutex_wait.go),
// else through the lock's queue in Redis.
func (m *Mutex) unlock(ctx context.Context, owner string) error {
	if !m.fair() {
		if done, err := m.c.handOff(ctx, m, owner); done {
			return err
		}
	}
	return m.release(ctx, owner)
}

// transfer moves the lock from owner to next for px, and returns next's
// fencing token (mutex_transfer.lua), and whether the Redis client sent
// the script more than once (driver.Call.Resent).
func (m *Mutex) transfer(ctx context.Context, owner, next string, px time.Duration) (fence int64, moved, resent bool, err error) {
	fence, r, err := protocol.MutexTransfer(ctx, m.c.drv, m.keys.lock, m.keys.fence, owner, next, px, fenceRetention(m.cfg.ttl))
	return fence, true, r.Resent, err
}

// release is Unlock's script, and how an abandoned waiter leaves the queue.
// When the lock passes to a waiter of this same Client, the waiter is told
// directly, ahead of the pub/sub message.
func (m *Mutex) release(ctx context.Context, owner string) error {
	r, err := protocol.MutexRelease(ctx, m.c.drv, m.keys.array(), owner, m.mode(), &m.cfg.timings,
		func(next string, fence int64, px time.Duration) {
			m.c.notify.Deliver(m.channel(), next, fence, px)
		})
	return releaseErr(r, err)
}

func (m *Mutex) RenewCalls(owner string, px time.Duration, shorten bool) []*driver.Call {
	return protocol.OwnedExtend(m.keys.lock, "", owner, px, shorten).Batch()
}

func (m *Mutex) RenewResult(calls []*driver.Call) error { return protocol.ExtendResult(calls) }

func (m *Mutex) RecordCalls(owner string, age, retention time.Duration) []*driver.Call {
	return []*driver.Call{protocol.HeldRecord(m.keys.held, owner, age, retention)}
}

func (m *Mutex) Renew(ctx context.Context, owner string, px time.Duration, shorten bool) error {
	return renewVia(ctx, m.c.drv, m, owner, px, shorten)
}

func (m *Mutex) Remaining(ctx context.Context, owner string) (time.Duration, error) {
	return protocol.OwnedPTTL(ctx, m.c.drv, m.keys.lock, owner)
}
