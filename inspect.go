package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// Kind is a kind of primitive, as Inspect reports it. Each kind keeps its
// own keys under a name, so one name can have state of several kinds.
type Kind string

// The kinds Inspect reports.
const (
	// KindMutex is the state of a Mutex, which FairMutex and MultiLock
	// share: they are the same lock.
	KindMutex Kind = "mutex"
	// KindReentrant is the state of a ReentrantMutex.
	KindReentrant Kind = "reentrant"
	// KindRWMutex is the state of an RWMutex.
	KindRWMutex Kind = "rwmutex"
	// KindSemaphore is the state of a Semaphore.
	KindSemaphore Kind = "semaphore"
	// KindLatch is the state of a Latch.
	KindLatch Kind = "latch"
	// KindElection is the state of an Election: its leader as the holder,
	// its campaigners as waiters, and the last term as LastToken.
	KindElection Kind = "election"
)

// The modes of Holder.Mode and Waiter.Mode for an RWMutex.
const (
	ModeRead  = "read"
	ModeWrite = "write"
)

// LockInfo is the state of one kind of primitive under one name, as
// Client.Inspect and Client.List read it: who holds it, who waits for it,
// and its last fencing token. It is a snapshot, taken atomically (by one
// script) for each name.
type LockInfo struct {
	// Name is the primitive's name.
	Name string
	// Kind says which kind of primitive the state belongs to.
	Kind Kind
	// Holders are the live holders, in the order they were granted (by
	// token): at most one for a Mutex or ReentrantMutex, one writer or any
	// number of readers for an RWMutex, every acquisition for a Semaphore.
	// Empty when nobody holds it; always empty for a Latch.
	Holders []Holder
	// Waiters are the live waiters in the order they will be served, as
	// Redis sees them: the goroutines of one Client waiting for a Mutex
	// share one place in its queue (see Mutex), so they show as one
	// waiter; FairMutex waiters each have their own.
	Waiters []Waiter
	// LastToken is the last fencing token issued for this kind under the
	// name; 0 for a Latch, and once the counter has expired, some time after
	// the last grant (docs/scripts.md, "Fencing tokens"). Tokens keep
	// increasing all the same.
	LastToken int64
	// Permits is, for a Semaphore, the limit stored by SetPermits or
	// AddPermits; 0 when none is stored and the permits passed by the
	// callers apply (Redis does not know those). 0 for other kinds.
	Permits int
	// Count is, for a Latch, its count. 0 for other kinds.
	Count int64
	// TTL is, for a Latch, the time until it expires and reads as zero. 0
	// for other kinds, whose holders have a TTL each.
	TTL time.Duration
}

// Holder is one holder of a lock or of semaphore permits.
type Holder struct {
	// Owner identifies the holder: the random id of its acquisition (32 hex
	// digits), or for a ReentrantMutex "<client instance id>:<identity>",
	// the identity being the one given to WithOwner.
	Owner string
	// Info is the owner information the holder chose (WithOwnerInfo),
	// "host=<hostname> pid=<pid>" by default; empty when it chose none.
	Info string
	// Mode is ModeRead or ModeWrite for an RWMutex, empty otherwise.
	Mode string
	// Holds is the holder's hold count for a ReentrantMutex, 0 otherwise.
	Holds int
	// Permits is the number of permits held, for a Semaphore; 0 otherwise.
	Permits int
	// Token is the holder's fencing token; 0 when it is no longer
	// remembered (the lock's counter expired while it was held: see
	// LockInfo.LastToken).
	Token int64
	// TTL is the holder's remaining time as the server saw it, after which
	// it expires unless renewed.
	TTL time.Duration
	// HeldFor is how long the holder has held the lock, by the server's
	// clock; 0 until known. The watchdog records a hold's start with its
	// first renewal a quarter of its TTL or more after the grant, so a
	// younger hold, or one the watchdog does not renew, shows 0
	// (docs/guide.md, "How long a holder has held a lock").
	HeldFor time.Duration
}

// Waiter is one waiter in a primitive's queue.
type Waiter struct {
	// Owner identifies the waiter, as Holder.Owner does.
	Owner string
	// Info is the owner information the waiter chose, as Holder.Info.
	Info string
	// Mode is ModeRead or ModeWrite for an RWMutex, empty otherwise.
	Mode string
	// Permits is the number of permits asked for, for a Semaphore; 0
	// otherwise.
	Permits int
	// Position is the waiter's 1-based place in the queue.
	Position int
	// LeaseLeft is how long the waiter keeps its place without refreshing
	// it: a waiter that died leaves the queue when it runs out.
	LeaseLeft time.Duration
	// WaitedFor is how long the waiter has been in the queue, by the
	// server's clock.
	WaitedFor time.Duration
}

// Inspect reads the state of every kind of primitive called name in one
// atomic step (one script, which also works on Redis Cluster) and returns
// one LockInfo per kind that has any: holders with their owner information
// and remaining time, waiters in order, the last fencing token. Mutex,
// FairMutex and MultiLock share one state, KindMutex. A name without any
// state returns no LockInfo and no error; a kind whose lock was released
// recently still reports its last token, with no holders. Inspect changes
// nothing and is safe for concurrent use. It returns ErrInvalidArgument for
// an invalid name, ErrKeyConflict when one of the name's keys holds
// something dlock did not write, ErrClosed, or the failure to reach Redis.
func (c *Client) Inspect(ctx context.Context, name string) ([]LockInfo, error) {
	st, err := c.inspect(ctx, "Inspect", name)
	if err != nil {
		return nil, err
	}
	return st.infos, nil
}

// inspect runs inspect.lua for name and parses its reply.
func (c *Client) inspect(ctx context.Context, op, name string) (*nameState, error) {
	if err := checkName(name); err != nil {
		return nil, errs.Errorf("dlock: %s: %w", op, err)
	}
	if err := c.checkOpen(op, name); err != nil {
		return nil, err
	}
	call := c.inspectCall(name)
	c.drv.Run(ctx, call)
	st, err := parseInspect(name, call)
	if err != nil {
		return nil, errs.Redis(op, name, err)
	}
	st.op = op
	return st, nil
}

// inspectKeys returns the keys inspect.lua reads for name, in the order of
// its KEYS, taken from each primitive's own key constructor.
func (c *Client) inspectKeys(name string) []string {
	p := c.cfg.keyPrefix
	var keys []string
	mutexKeys := newLockKeys(p, name)
	keys = append(keys, mutexKeys.list()...)
	reentrant, rw := c.ReentrantMutex(name), newRWKeys(p, name)
	sem, _ := newSemKeys(p, name, nil)
	keys = append(keys, reentrant.all[:]...)
	keys = append(keys, rw.all[:]...)
	keys = append(keys, sem.all[:]...)
	keys = append(keys, c.Latch(name).key)
	base := electionBase(p, name)
	electionKeys := newLockKeysAt(base)
	keys = append(keys, electionKeys.list()...)
	keys = append(keys, electionRecord(base))
	return append(keys, mutexKeys.held, reentrant.keys.held, rw.held, sem.held, electionKeys.held)
}

func (c *Client) inspectCall(name string) *driver.Call {
	return protocol.Inspect(c.inspectKeys(name))
}
