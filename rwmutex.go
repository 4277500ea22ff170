package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/scripts"
)

// RWMutex is a distributed read-write lock: at any moment either any number
// of readers hold it or one writer does, across every process that uses the
// same name on the same Redis. Get one from Client.RWMutex; it is an
// immutable descriptor, safe for concurrent use, and cheap to create per call.
//
// The rules:
//
//   - A writer (Lock, TryLock) is granted when nobody holds the lock and
//     nobody live is queued ahead of it.
//   - A reader (RLock, TryRLock) is granted when no writer holds the lock and
//     nobody live is queued. Readers only ever queue behind a writer, holding
//     or waiting, so the lock is writer-preferring: once a writer waits, new
//     readers wait behind it, and a stream of readers can never starve a
//     writer.
//   - Waiters are served in arrival order. When a holder releases, the lock
//     is handed straight to the head of the queue: the first writer once no
//     holder is left, or every reader queued before the next writer at once.
//   - A writer may turn its lease into a read lease with Downgrade, with no
//     moment in between where another writer could get in.
//   - As with sync.RWMutex, a holder must not RLock (or Lock) the same lock
//     again while it holds it: a writer queued in between waits for the
//     first lease while the second waits behind the writer, until their
//     contexts end.
//
// Every holder, reader or writer, has a Lease of its own, with its own TTL,
// renewal by the Client's watchdog, fencing token and Unlock: a reader that
// crashes frees its share when its TTL runs out, without waiting for the
// other readers. Fencing tokens come from one sequence for both modes, so a
// writer's token is larger than that of every lease granted before it, and
// a reader's larger than that of every writer before it. Waiters that give up
// leave the queue at once; waiters that die leave it when their waiter lease
// (WithWaiterLease) runs out.
//
// An RWMutex and a Mutex of the same name are different locks: they use
// different keys and never exclude each other.
type RWMutex struct {
	c      *Client
	name   string
	cfg    config
	keys   rwKeys
	ms     rwMillis
	err    error  // invalid name or option, reported by every call that reaches Redis
	writer rwHalf // in the descriptor: one allocation fewer each
	reader rwHalf
}

// rwMillis are an RWMutex's timings in the milliseconds its scripts take,
// computed with the descriptor: its script calls pass them by pointer,
// which boxes nothing (an int64 in an interface is an allocation).
type rwMillis struct {
	ttl, waiterLease, claimWindow, fenceRetention int64
}

// Lock modes: the first byte of every holder and queue member.
const (
	rwWrite byte = 'W'
	rwRead  byte = 'R'
)

// rwHalf is one mode of an RWMutex: the queuedLock that the shared waiting
// loop (Client.acquire) and the watchdog work with. The owner values they
// pass around are the usual fresh ones; in Redis a holder or waiter is known
// by its member, the mode byte followed by the owner value. Grant messages
// name the owner value alone, which is unique already, so the notifier
// routes them to the waiter registered under it.
type rwHalf struct {
	rw   *RWMutex
	mode byte
}

var (
	_ queuedLock   = (*rwHalf)(nil)
	_ batchRenewer = (*rwHalf)(nil)
)

// rwKeys names the keys of one read-write lock. They are the lock's own, so
// a Mutex of the same name never touches them, and they share its hash tag.
type rwKeys struct {
	holders string // zset: member -> expiry (server ms); also the channel
	fence   string // last fencing token issued, for both modes
	queue   string // zset: waiting members by arrival
	waiters string // hash: waiting members' leases
	tokens  string // hash: member -> its fencing token
	all     []string
	renew   []string
}

func newRWKeys(prefix, name string) rwKeys {
	keys := keyFamily(prefix, name, ":rw", "", ":fence", ":q", ":w", ":tok")
	return rwKeys{
		holders: keys[0],
		fence:   keys[1],
		queue:   keys[2],
		waiters: keys[3],
		tokens:  keys[4],
		all:     keys,
		renew:   []string{keys[0], keys[4]},
	}
}

// RWMutex returns the read-write lock called name. opts override the
// Client's defaults for this lock, for both modes. It sends nothing and never
// fails: an invalid name or option is reported by the first call that would
// reach Redis. An RWMutex is a cheap, immutable descriptor, safe for
// concurrent use; any number of them may name the same lock.
func (c *Client) RWMutex(name string, opts ...Option) *RWMutex {
	cfg := c.cfg
	cfg.errs = nil
	for _, opt := range opts {
		if opt == nil {
			cfg.fail(errs.InvalidArgf("nil Option"))
			continue
		}
		opt(&cfg)
	}
	rw := &RWMutex{c: c, name: name, cfg: cfg, keys: newRWKeys(cfg.keyPrefix, name), ms: rwMillis{
		ttl:            cfg.initialPX().Milliseconds(),
		waiterLease:    cfg.waiterLease.Milliseconds(),
		claimWindow:    cfg.claimWindow().Milliseconds(),
		fenceRetention: fenceRetention(cfg.ttl).Milliseconds(),
	}}
	if err := checkName(name); err != nil {
		rw.err = errs.Errorf("dlock: RWMutex: %w", err)
	} else if err := cfg.err(); err != nil {
		rw.err = errs.Errorf("dlock: RWMutex(%q): %w", name, err)
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
	return rw.c.acquire(ctx, &rw.writer, &rw.cfg, true)
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
	return rw.c.acquire(ctx, &rw.reader, &rw.cfg, true)
}

// errDowngraded is the Err of a write lease that Downgrade ended.
var errDowngraded = fmt.Errorf("%w: downgraded to a read lease", ErrNotHeld)

// Downgrade turns write, a write lease of this lock, into a read lease in
// one atomic step: the lock never stands free in between, so no other
// writer can get in, and the readers queued at the head of the queue are
// granted at once (a writer queued ahead of them keeps waiting, now for the
// readers). The write lease ends: its Done closes and its Err matches
// ErrNotHeld; do not Unlock it. The returned read lease has a new fencing
// token, larger than the write lease's, so a resource that fences by token
// refuses writes still carrying the old one once it has seen the new one.
// It keeps the write lease's WithMaxHold deadline.
//
// Downgrade returns ErrInvalidArgument when write is not a write lease of
// this lock (same name, key prefix and Client), and an error matching
// ErrNotHeld when write no longer holds the lock (it expired, was lost,
// unlocked or downgraded already; it then ends). When Redis cannot be
// reached, write stays held and renewed; if the downgrade did reach Redis
// after all, write's next renewal reports it lost, and the read lease
// created is released in the background. With WithReplicaAck, a downgrade
// that too few replicas acknowledged ends write and releases the read lease
// again, returning an error matching ErrReplicaAck. Downgrade is safe for
// concurrent use; the caller must Unlock the returned Lease.
func (rw *RWMutex) Downgrade(ctx context.Context, write *Lease) (*Lease, error) {
	if rw.err != nil {
		return nil, rw.err
	}
	var h *rwHalf
	if write != nil {
		h, _ = write.h.(*rwHalf)
	}
	if h == nil || h.mode != rwWrite || h.rw.c != rw.c || h.rw.keys.holders != rw.keys.holders {
		return nil, errs.InvalidArgf("RWMutex(%q).Downgrade: not a write lease of this lock", rw.name)
	}
	if err := rw.c.checkOpen("Downgrade", rw.name); err != nil {
		return nil, err
	}
	owner, err := ownerid.New(rw.cfg.ownerInfo)
	if err != nil {
		return nil, err
	}
	wd := rw.c.wd
	wd.mu.Lock()
	lost, holdUntil, validUntil := write.err, write.holdUntil, write.validUntil
	wd.mu.Unlock()
	switch {
	case lost == errDowngraded:
		return nil, errs.Errorf("dlock: Downgrade %q: %w already", rw.name, lost)
	case lost != nil:
		return nil, errs.Errorf("dlock: Downgrade %q: %w: the lease was lost: %v", rw.name, ErrNotHeld, lost)
	}
	// Stop renewing write and wait for a renewal in flight, as Unlock does:
	// no renewal of the writer may follow the downgrade.
	if err := wd.beginUnlock(ctx, write, true); err != nil {
		return nil, errs.Errorf("dlock: Downgrade %q: %w", rw.name, err)
	}

	start := time.Now()
	cfg := &rw.cfg
	px := cfg.initialPX()
	if !holdUntil.IsZero() {
		// The read lease inherits the write lease's hold deadline.
		rest := holdUntil.Sub(start)
		if rest < px {
			px = rest
		}
		inherit := rw.cfg
		inherit.maxHold = rest
		cfg = &inherit
	}
	px = px.Truncate(time.Millisecond)
	if px < MinTTL {
		wd.resume(write)
		return nil, errs.Errorf("dlock: Downgrade %q: %w: the maximum hold time (WithMaxHold) is reached", rw.name, ErrNotHeld)
	}

	// Past write's validity the answer no longer matters: write is lost then.
	dctx, cancel := context.WithDeadline(ctx, validUntil)
	fence, err := rw.downgrade(dctx, write.owner, owner, px)
	cancel()
	switch {
	case err == nil || errors.Is(err, ErrReplicaAck):
		wd.mu.Lock()
		write.state = leaseReleased
		write.err = errDowngraded
		write.closeDoneLocked()
		wd.mu.Unlock()
		wd.poke()
		if err != nil {
			// Downgraded, but too few replicas have the read lease: give
			// it back, as an acquire would.
			rctx, cancel := detach(ctx, cfg.releaseTimeout)
			defer cancel()
			if rerr := rw.reader.release(rctx, owner); rerr != nil && !errors.Is(rerr, ErrNotHeld) {
				cfg.logger.Warn("dlock: releasing a read lease that too few replicas acknowledged failed; it expires by its TTL",
					slog.String("lock", rw.name), slog.Any("error", rerr))
			}
			return nil, errs.Redis("Downgrade", rw.name, err)
		}
		return newLease(ctx, wd, &rw.reader, cfg, owner, fence, start, px)
	case errors.Is(err, ErrNotHeld):
		wd.mu.Lock()
		funcs := wd.loseLocked(write, "Downgrade found the lock expired or held by others")
		write.state = leaseReleased
		wd.mu.Unlock()
		runLossFuncs(funcs, write)
		wd.poke()
		return nil, errs.Errorf("dlock: Downgrade %q: %w: it expired or was taken over", rw.name, ErrNotHeld)
	}
	wd.resume(write)
	rw.c.abandon(ctx, &rw.reader, cfg, owner, err, nil)
	return nil, errs.Redis("Downgrade", rw.name, err)
}

// downgrade runs rw_downgrade.lua and translates its reply: the read
// lease's fencing token, or ErrNotHeld; with replica acknowledgement, an
// error matching ErrReplicaAck when the downgrade happened but too few
// replicas acknowledged it. Waiters of this Client that it granted are told
// directly.
func (rw *RWMutex) downgrade(ctx context.Context, writeOwner, readOwner string, px time.Duration) (int64, error) {
	call := &driver.Call{
		Script: scripts.RWDowngrade,
		Keys:   rw.keys.all,
		Args: []any{
			string(rwWrite) + writeOwner, string(rwRead) + readOwner, px.Milliseconds(),
			&rw.ms.fenceRetention, rw.c.drv.PublishCommand(), rw.keys.holders,
		},
	}
	rw.cfg.askAck(call)
	rw.c.drv.Run(ctx, call)
	if call.Err != nil {
		return 0, call.Err
	}
	items, ok := call.Reply.([]any)
	if !ok || len(items) == 0 {
		return 0, errs.Unexpected(call.Reply)
	}
	if code, _ := items[0].(int64); code == 0 && len(items) == 1 {
		return 0, ErrNotHeld
	}
	v, err := replyInts(items, 2)
	if err != nil || v[0] != 1 || !rw.deliver(items[2:]) {
		return 0, errs.Unexpected(call.Reply)
	}
	return v[1], ackErr(call)
}

// deliver tells this Client's waiters of the grants a script reports as
// {member, fence, px, ...}, ahead of the pub/sub messages. It reports
// whether the list was well formed.
func (rw *RWMutex) deliver(grants []any) bool {
	if len(grants)%3 != 0 {
		return false
	}
	for i := 0; i < len(grants); i += 3 {
		member, ok1 := grants[i].(string)
		fence, ok2 := grants[i+1].(int64)
		px, ok3 := grants[i+2].(int64)
		if !ok1 || !ok2 || !ok3 || len(member) < 2 {
			return false
		}
		rw.c.notify.Deliver(rw.keys.holders, member[1:], fence, ms(px))
	}
	return true
}

func (h *rwHalf) member(owner string) string { return string(h.mode) + owner }

func (h *rwHalf) place(owner string) placeSpec {
	return placeSpec{queue: h.rw.keys.queue, waiters: h.rw.keys.waiters, member: h.member(owner)}
}

func (h *rwHalf) lockName() string { return h.rw.name }

func (h *rwHalf) verbs() (try, wait string) {
	if h.mode == rwRead {
		return "TryRLock", "RLock"
	}
	return "TryLock", "Lock"
}

func (h *rwHalf) channel() string { return h.rw.keys.holders }

// attempt runs rw_acquire.lua and translates its reply.
func (h *rwHalf) attempt(ctx context.Context, owner string, queue bool) (attemptResult, error) {
	rw := h.rw
	a := newScriptCall(scripts.RWAcquire, rw.keys.all, h.member(owner))
	a.setArgs(&a.member, &rw.ms.ttl, boolFlag(queue), &rw.ms.waiterLease,
		&rw.ms.claimWindow, &rw.ms.fenceRetention,
		publishArg(rw.c.drv), &rw.keys.holders)
	call := &a.call
	rw.cfg.askAck(call)
	a.run(ctx, rw.c.drv)
	if call.Err != nil {
		return attemptResult{}, call.Err
	}
	if fence, ok := call.Reply.(int64); ok { // the free lock taken: the fast path's bare fence
		if fence <= 0 {
			return attemptResult{}, errs.Unexpected(call.Reply)
		}
		return grantAcked(ctx, h, &rw.cfg, owner, call, attemptResult{granted: true, fence: fence, pttl: ms(rw.ms.ttl)})
	}
	v, err := replyInts(call.Reply, 3)
	if err != nil {
		return attemptResult{}, err
	}
	if v[0] == 1 {
		return grantAcked(ctx, h, &rw.cfg, owner, call, attemptResult{granted: true, fence: v[1], pttl: ms(v[2])})
	}
	r := attemptResult{pttl: ms(v[1]), lastFence: lastFenceAt(call.Reply, 4)}
	if items, _ := call.Reply.([]any); len(items) > 3 {
		if free, _ := items[3].(int64); free == 1 {
			r.queuedAhead = "it is free for a writer, but " + errs.OthersFirst
			if h.mode == rwRead {
				r.queuedAhead = "no writer holds it, but a writer waiting for it goes first (writers are preferred, so readers cannot starve them)"
			}
		}
	}
	return r, nil
}

// release runs rw_release.lua, for Unlock and for a waiter that gives up,
// and translates its reply. Waiters of this Client that it granted are told
// directly.
func (h *rwHalf) release(ctx context.Context, owner string) error {
	rw := h.rw
	a := newScriptCall(scripts.RWRelease, rw.keys.all, h.member(owner))
	a.setArgs(&a.member, &rw.ms.fenceRetention, publishArg(rw.c.drv), &rw.keys.holders)
	call := &a.call
	a.run(ctx, rw.c.drv)
	if call.Err != nil {
		return call.Err
	}
	if held, ok := call.Reply.(int64); ok && held == 1 { // the fast path: released, nobody waits
		return nil
	}
	items, ok := call.Reply.([]any)
	if !ok || len(items) == 0 {
		return errs.Unexpected(call.Reply)
	}
	held, ok := items[0].(int64)
	if !ok || !rw.deliver(items[1:]) {
		return errs.Unexpected(call.Reply)
	}
	if held != 1 {
		return notHeld(call)
	}
	return nil
}

// renewCalls re-arms the holder's own expiry (rw_extend.lua, whose replies
// follow owned_extend.lua's, so ownedExtendResult reads them).
func (h *rwHalf) renewCalls(owner string, px time.Duration, shorten bool) []*driver.Call {
	return []*driver.Call{{Script: scripts.RWExtend, Keys: h.rw.keys.renew, Args: extendArgs(shorten, h.member(owner), px.Milliseconds())}}
}

func (h *rwHalf) renewResult(calls []*driver.Call) error { return ownedExtendResult(calls) }

func (h *rwHalf) renew(ctx context.Context, owner string, px time.Duration, shorten bool) error {
	return renewVia(ctx, h.rw.c.drv, h, owner, px, shorten)
}

// remaining runs rw_pttl.lua and translates its reply.
func (h *rwHalf) remaining(ctx context.Context, owner string) (time.Duration, error) {
	call := &driver.Call{Script: scripts.RWPTTL, Keys: []string{h.rw.keys.holders}, Args: []any{h.member(owner)}}
	h.rw.c.drv.Run(ctx, call)
	if call.Err != nil {
		return 0, call.Err
	}
	n, ok := call.Reply.(int64)
	switch {
	case !ok:
		return 0, errs.Unexpected(call.Reply)
	case n == -3:
		return 0, ErrNotHeld
	case n < 0:
		return 0, errs.Unexpected(call.Reply)
	}
	return ms(n), nil
}
