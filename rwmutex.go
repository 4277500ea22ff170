package dlock

import (
	"context"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// RWMutex is a distributed read-write lock: at any moment either any number
// of readers hold it or one writer does, across every process that uses the
// same name on the same Redis. Get one from Client.RWMutex; it is an
// immutable descriptor, safe for concurrent use, and cheap to create per call.
//
// Waiters are served in arrival order and handed the lock on release: the
// first writer once no holder is left, or every reader queued before the
// next writer. It is writer-preferring: once a writer waits, new readers
// queue behind it, so readers never starve a writer. A Client's writers
// share one place in the queue and may hand the lock to each other, a
// bounded number of times in a row, as a Mutex's waiters do
// (docs/waiting.md). Downgrade turns a write lease into a read lease with
// no moment in between. As with sync.RWMutex, a holder must not lock it
// again while it holds it.
//
// Every holder has a Lease of its own (TTL, renewal, fencing token,
// Unlock); tokens come from one sequence for both modes. An RWMutex and a
// Mutex of the same name are different locks.
type RWMutex struct {
	c      *Client
	name   string
	cfg    config
	keys   rwKeys
	ms     protocol.Timings // computed with the descriptor: calls point at them
	err    error            // invalid name or option, reported by every call that reaches Redis
	writer rwHalf           // in the descriptor: one allocation fewer each
	reader rwHalf
}

// Lock modes: the first byte of every holder and queue member.
const (
	rwWrite byte = 'W'
	rwRead  byte = 'R'
)

var (
	_ queuedLock   = (*rwHalf)(nil)
	_ batchRenewer = (*rwHalf)(nil)
	_ recorder     = (*rwHalf)(nil)
)

// rwKeys names the keys of one read-write lock. They are the lock's own, so
// a Mutex of the same name never touches them, and they share its hash tag.
type rwKeys struct {
	holders string // zset: member -> expiry (server ms); also the channel
	fence   string // last fencing token issued, for both modes
	queue   string // zset: waiting members by arrival
	waiters string // hash: waiting members' leases
	tokens  string // hash: member -> its fencing token
	held    string // hash: member -> when its hold began (held_record.lua)
	// all are the five keys above, the scripts' KEYS, and renew is
	// rw_extend.lua's: arrays, so that they live in the descriptor's own
	// allocation.
	all   [5]string
	renew [2]string
}

func newRWKeys(prefix, name string) rwKeys {
	var k [6]string
	keyFamily(k[:], nil, prefix, name, ":rw", "", ":fence", ":q", ":w", ":tok", ":held")
	return rwKeys{
		holders: k[0],
		fence:   k[1],
		queue:   k[2],
		waiters: k[3],
		tokens:  k[4],
		held:    k[5],
		all:     [5]string(k[:5]),
		renew:   [2]string{k[0], k[4]},
	}
}

// RWMutex returns the read-write lock called name. opts override the
// Client's defaults for this lock, for both modes. It sends nothing and never
// fails: an invalid name or option is reported by the first call that would
// reach Redis. An RWMutex is a cheap, immutable descriptor, safe for
// concurrent use; any number of them may name the same lock.
func (c *Client) RWMutex(name string, opts ...Option) *RWMutex {
	rw := &RWMutex{c: c, name: name}
	cfgErr := c.applyOptions(&rw.cfg, "RWMutex", name, opts)
	rw.keys, rw.ms = newRWKeys(rw.cfg.keyPrefix, name), queueTimings(&rw.cfg)
	if err := checkName(name); err != nil {
		rw.err = errs.Errorf("dlock: RWMutex: %w", err)
	} else if cfgErr != nil {
		rw.err = cfgErr
	}
	rw.writer = rwHalf{rw: rw, mode: rwWrite}
	rw.reader = rwHalf{rw: rw, mode: rwRead}
	return rw
}

// Name returns the lock's name.
func (rw *RWMutex) Name() string { return rw.name }

// TryLock makes one attempt to take the lock for writing, in one round trip.
// It returns an error matching ErrNotObtained when anyone holds the lock or
// waits for it, ErrInvalidArgument for an invalid name or option,
// ErrKeyConflict when the lock's keys hold something dlock did not write,
// and ErrClosed after Client.Close. The caller must Unlock the returned
// Lease (or Downgrade it).
func (rw *RWMutex) TryLock(ctx context.Context) (*Lease, error) {
	if rw.err != nil {
		return nil, rw.err
	}
	return rw.c.acquire(ctx, &rw.writer, &rw.cfg, false)
}

// Lock takes the lock for writing, waiting as long as ctx allows: until the
// readers and the writer holding it and every waiter queued earlier are
// done. While it waits, new readers queue behind it. When ctx ends first,
// the error matches both ErrNotObtained and ctx's error, and the waiter has
// left the queue (readers queued behind it are granted if nothing else
// blocks them). Failures to reach Redis are retried while ctx allows; other
// errors are returned at once: ErrInvalidArgument, ErrKeyConflict, ErrClosed.
// The caller must Unlock the returned Lease (or Downgrade it).
func (rw *RWMutex) Lock(ctx context.Context) (*Lease, error) {
	if rw.err != nil {
		return nil, rw.err
	}
	ctx, cancel := rw.cfg.boundWait(ctx)
	defer cancel()
	if rw.cfg.wait.spin {
		return rw.c.acquire(ctx, &rw.writer, &rw.cfg, true)
	}
	if rw.cfg.observer != nil {
		return observeAcquire(ctx, &rw.cfg, KindRWMutex, rw.name, "Lock", rw.lock)
	}
	return rw.lock(ctx)
}

// TryRLock makes one attempt to take the lock for reading, in one round
// trip. It returns an error matching ErrNotObtained when a writer holds the
// lock or anyone waits for it (a waiting writer goes first), and otherwise
// the errors of TryLock. The caller must Unlock the returned Lease.
func (rw *RWMutex) TryRLock(ctx context.Context) (*Lease, error) {
	if rw.err != nil {
		return nil, rw.err
	}
	return rw.c.acquire(ctx, &rw.reader, &rw.cfg, false)
}

// RLock takes the lock for reading, waiting as long as ctx allows: at once
// when only readers hold it and nobody waits, otherwise behind the writers
// holding it or queued for it. Its errors are those of Lock. The caller must
// Unlock the returned Lease.
func (rw *RWMutex) RLock(ctx context.Context) (*Lease, error) {
	if rw.err != nil {
		return nil, rw.err
	}
	ctx, cancel := rw.cfg.boundWait(ctx)
	defer cancel()
	return rw.c.acquire(ctx, &rw.reader, &rw.cfg, true)
}
