package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/hold"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/wait"
)

// MaxOwnerIDLen is the longest owner identity WithOwner accepts, in bytes.
const MaxOwnerIDLen = 256

type ownerKey struct{}

// WithOwner returns a context that carries id as the owner identity for
// reentrant locks: a ReentrantMutex locked again with a context carrying the
// same id, through the same Client, adds a hold instead of waiting. Use a
// stable id per logical owner (a job, a request); NewOwnerID makes a random
// one. Reentrancy is per Client: two processes never share an owner. The id
// must be non-empty, at most MaxOwnerIDLen bytes, without ';' (it becomes
// part of the lock's owner value, where ';' begins the owner info):
// otherwise locking fails with ErrInvalidArgument.
func WithOwner(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ownerKey{}, id)
}

// OwnerFrom returns the owner identity ctx carries, if any.
func OwnerFrom(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(ownerKey{}).(string)
	return id, ok
}

// NewOwnerID returns a random owner identity for WithOwner.
func NewOwnerID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

func checkOwnerID(id string) error {
	switch {
	case id == "":
		return errs.InvalidArgf("empty owner identity")
	case len(id) > MaxOwnerIDLen:
		return errs.InvalidArgf("owner identity of %d bytes is longer than %d", len(id), MaxOwnerIDLen)
	case strings.Contains(id, ";"):
		return errs.InvalidArgf("owner identity %q contains ';'", id)
	}
	return nil
}

// ReentrantMutex is a mutex that its owner may lock again while holding it:
// each Lock by the same owner adds a hold, and the lock is released when
// every hold has been unlocked. The owner is the identity carried by the
// context (WithOwner), never a goroutine: pass the same id down a call chain
// to nest. Get one from Client.ReentrantMutex; it is an immutable
// descriptor, safe for concurrent use.
//
// Every Lock returns its own Lease, to be unlocked once; an owner's holds
// share one renewal and the grant's fencing token, and are lost together.
// Holds are counted by id, so an acquire retried after a lost reply never
// counts twice. Waiting holds of a Client's owners share one place in the
// queue, and an owner's last Unlock may hand the lock to the next of them,
// a bounded number of times in a row, as a Mutex's waiters do
// (docs/waiting.md).
// A ReentrantMutex and a Mutex of the same name are different locks.
type ReentrantMutex struct {
	c     *Client
	name  string
	cfg   config
	keys  lockKeys
	holds string // the set of the holder's hold ids, from its second hold on
	// all are the scripts' KEYS: the lock's keys, then holds, in an array
	// so that they live in the descriptor's own allocation.
	all [5]string
	err error
}

// ReentrantMutex returns the reentrant lock called name. opts override the
// Client's defaults. It sends nothing and never fails: an invalid name or
// option is reported by the first TryLock or Lock.
func (c *Client) ReentrantMutex(name string, opts ...Option) *ReentrantMutex {
	m := &ReentrantMutex{c: c, name: name}
	err := c.lockConfig(&m.cfg, "ReentrantMutex", name, opts)
	if err == nil && m.cfg.minHold > 0 {
		// Holds of one owner share the key: one Unlock leaving it to
		// expire would end the others too.
		err = errs.Errorf("dlock: ReentrantMutex(%q): %w", name, errs.InvalidArgf("WithMinHold does not apply to a ReentrantMutex, whose holds share one key"))
	}
	var k [6]string
	keyFamily(k[:], nil, m.cfg.keyPrefix, name, ":re", "", ":fence", ":q", ":w", ":holds", ":held")
	m.keys = lockKeys{lock: k[0], fence: k[1], queue: k[2], waiters: k[3], held: k[5]}
	m.holds, m.all, m.err = k[4], [5]string(k[:5]), err
	return m
}

// Name returns the lock's name.
func (m *ReentrantMutex) Name() string { return m.name }

// Lock takes the lock for the owner that ctx carries (WithOwner), adding a
// hold when that owner holds it already, or waits as Mutex.Lock does. It
// returns ErrInvalidArgument when ctx carries no valid owner, and otherwise
// the errors of Mutex.Lock. The caller must Unlock the returned Lease.
func (m *ReentrantMutex) Lock(ctx context.Context) (*Lease, error) {
	ctx, cancel := m.cfg.boundWait(ctx)
	defer cancel()
	return m.lock(ctx, true)
}

// TryLock is Lock without waiting: it adds a hold when ctx's owner holds the
// lock, takes it when free, and otherwise returns an error matching
// ErrNotObtained.
func (m *ReentrantMutex) TryLock(ctx context.Context) (*Lease, error) { return m.lock(ctx, false) }

// HoldCount returns how many holds ctx's owner has on the lock: 0 when
// another owner or nobody holds it.
func (m *ReentrantMutex) HoldCount(ctx context.Context) (int, error) {
	owner, err := m.owner(ctx)
	if err != nil {
		return 0, err
	}
	if err := m.c.checkOpen("HoldCount", m.name); err != nil {
		return 0, err
	}
	n, err := protocol.ReentrantHolds(ctx, m.c.drv, m.keys.lock, m.holds, owner)
	if err != nil {
		return 0, errs.Redis("HoldCount", m.name, err)
	}
	return int(n), nil
}

// owner returns the owner value of ctx's owner: the Client's instance id,
// so no other process shares it, the identity, and the owner info.
func (m *ReentrantMutex) owner(ctx context.Context) (string, error) {
	member, err := m.newMember(ctx)
	if err != nil {
		return "", err
	}
	return member[ownerid.IDLen:], nil
}

// newMember returns a fresh hold id followed by the owner value of ctx's
// owner: a hold's first place, and its owner value, in one string.
func (m *ReentrantMutex) newMember(ctx context.Context) (string, error) {
	if m.err != nil {
		return "", m.err
	}
	id, ok := OwnerFrom(ctx)
	if !ok {
		return "", errs.Errorf("dlock: ReentrantMutex(%q): %w", m.name,
			errs.InvalidArgf("the context carries no owner: use ctx = dlock.WithOwner(ctx, id)"))
	}
	if err := checkOwnerID(id); err != nil {
		return "", errs.Errorf("dlock: ReentrantMutex(%q): %w", m.name, err)
	}
	if m.cfg.ownerInfo != "" {
		return ownerid.Prefixed(m.c.instance, ":", id, ";", m.cfg.ownerInfo) // the hold id, then the owner value
	}
	return ownerid.Prefixed(m.c.instance, ":", id)
}

func (m *ReentrantMutex) lock(ctx context.Context, wait bool) (*Lease, error) {
	if m.cfg.observer != nil && m.err == nil {
		return observeAcquire(ctx, &m.cfg, KindReentrant, m.name, acquireOp(wait), func(ctx context.Context) (*Lease, error) {
			return m.lockUnobserved(ctx, wait)
		})
	}
	return m.lockUnobserved(ctx, wait)
}

func (m *ReentrantMutex) lockUnobserved(ctx context.Context, wait bool) (*Lease, error) {
	member, err := m.newMember(ctx)
	if err != nil {
		return nil, err
	}
	// The queue entry, and the grant, name this hold: hold id + owner value.
	h := &reentrantHold{m: m, owner: member[ownerid.IDLen:], fresh: member}
	if wait && !m.cfg.wait.spin {
		// The holds of the Client's owners wait in its local line, as a
		// Mutex's waiters do (mutex_wait.go).
		if err := m.c.checkOpen("Lock", m.name); err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, errs.WaitEnded(ctx, m.name, time.Now(), 0, nil)
		}
		return m.c.lockShared(ctx, h)
	}
	if member, err = h.newPlace(); err != nil {
		return nil, err
	}
	return m.c.acquireAs(ctx, h, &m.cfg, wait, member)
}

// isHoldOf reports whether member, a queue entry or grant of this lock,
// is one of owner's holds: a hold id (newOwner's ownerid.IDLen hex digits),
// then owner.
func isHoldOf(member, owner string) bool {
	return len(member) == ownerid.IDLen+len(owner) && member[ownerid.IDLen:] == owner
}

// reentrantHold is one Lock call's hold: the queuedLock acquire waits with,
// and then the holder of the Lease it returns.
type reentrantHold struct {
	m     *ReentrantMutex
	owner string
	hold  string
	// member is the hold's latest place: hold, then owner (newPlace);
	// fresh, until newPlace takes it, the first, made with owner.
	member, fresh string
	// grant is the id of the hold that took the grant this hold joined,
	// from the attempt that granted it; "" when this hold took it (or was
	// handed it).
	grant string
	// lease is the Lease the hold is granted (makeLease), at most one:
	// made with the hold, both cost one allocation.
	lease Lease
}

var (
	_ lineLock   = (*reentrantHold)(nil)
	_ leaseMaker = (*reentrantHold)(nil)
)

func (h *reentrantHold) lockName() string { return h.m.name }
func (h *reentrantHold) kind() Kind       { return KindReentrant }
func (h *reentrantHold) channel() string  { return h.m.keys.channel() }

// place: member is the hold id followed by the owner value (lockUnobserved).
func (h *reentrantHold) place(member string) wait.Place {
	return wait.Place{Queue: h.m.keys.queue, Waiters: h.m.keys.waiters, Member: member}
}

func (h *reentrantHold) attempt(ctx context.Context, member string, queue bool) (wait.Result, error) {
	m := h.m
	h.grant = ""
	a, err := protocol.ReentrantAcquire(ctx, m.c.drv, m.all[:], member, &m.cfg.pxMillis,
		protocol.Join(queue), protocol.LockMode(m.c.drv, false), &m.cfg.timings, m.cfg.ack())
	if err != nil {
		return wait.Result{}, err
	}
	if a.Grant != "" && a.Grant != h.hold {
		h.grant = a.Grant
	}
	return grantAcked(ctx, h, &m.cfg, member, a)
}

// release gives up this hold (or its place in the queue), which no Lease
// holds: when it was the owner's last hold the lock is released, or handed
// to the next waiter.
func (h *reentrantHold) release(ctx context.Context, member string) error {
	_, err := h.sendRelease(ctx, member)
	return err
}

// unlock is the release of the hold's Lease. Its BeginUnlock paused the
// renewals of the owner's anchor when every hold on it is being released
// (and waited for one in flight), so that no renewal follows the owner's
// last release, even when several goroutines release the owner's holds
// at the same moment; its EndUnlock does the anchor's part of the outcome
// (hold.Lease's nesting). The owner's last hold may hand the lock straight
// to a hold of another owner of this Client that waits in its local line
// (mutex_wait.go).
func (h *reentrantHold) unlock(ctx context.Context, member string) error {
	if h.lease.s.ReleasesLast() {
		_, err := h.sendUnlock(ctx, member)
		return err
	}
	return h.release(ctx, member)
}

// sendUnlock is sendRelease by way of a local hand-off, when one serves.
func (h *reentrantHold) sendUnlock(ctx context.Context, member string) (ended bool, err error) {
	done, err := h.m.c.handOff(ctx, h, member)
	if !done {
		return h.sendRelease(ctx, member)
	}
	return err == nil || errors.Is(err, ErrNotHeld), err
}

// sendRelease runs the release script; ended reports that the hold is gone
// (released, handed on, or no longer there).
func (h *reentrantHold) sendRelease(ctx context.Context, member string) (ended bool, err error) {
	m := h.m
	r, err := protocol.ReentrantRelease(ctx, m.c.drv, m.all[:], member, protocol.LockMode(m.c.drv, false), &m.cfg.timings,
		func(next string, fence int64, px time.Duration) {
			m.c.notify.Deliver(m.keys.channel(), next, fence, px)
		})
	return r.Ended, releaseErr(r, err)
}

// renew, remaining: a hold's lease delegates Extend and TTL to its anchor
// (hold.Lease's parent), so these serve only the anchor's holder, reentrantOwner,
// for the grant the hold joined.
func (h *reentrantHold) Renew(ctx context.Context, _ string, px time.Duration, shorten bool) error {
	return renewVia(ctx, h.m.c.drv, (*reentrantOwner)(h.m), h.grantValue(), px, shorten)
}

func (h *reentrantHold) Remaining(ctx context.Context, _ string) (time.Duration, error) {
	return protocol.OwnedPTTL(ctx, h.m.c.drv, h.m.keys.lock, h.grantValue())
}

// grantValue is what the lock's key holds while the grant this hold joined
// lasts: the id of the hold that took it, then the owner value. Renewals
// and TTLs compare all of it, so they never act on a later grant of the
// same owner.
func (h *reentrantHold) grantValue() string {
	if h.grant != "" {
		return h.grant + h.owner
	}
	return h.member
}

// makeLease returns the Lease of a granted hold: a nested hold of the
// anchor of the grant it joined, which the grant's first hold here creates.
func (h *reentrantHold) makeLease(ctx context.Context, cfg *config, member string, r wait.Result, from time.Time) (*Lease, error) {
	m := h.m
	grant := h.grantValue()
	l := &h.lease
	init := func(a *anchor) {
		// A nested hold carries its owner's grant's token. The server
		// reports the counter's value, which is 0 once the counter expired
		// under an owner that held the lock longer than its retention
		// (renewals do not push it back), so the anchor's token, from the
		// grant, stands in.
		*l = Lease{h: h, cfg: cfg, token: max(r.Fence, a.lease.token), grantedAt: time.Now()}
		l.s.Init(m.c.wd, (*leaseHost)(l), member, hold.Settings{TTL: cfg.ttl}, &a.lease.s)
	}
	key := anchorKey{lock: m.keys.lock, grant: grant}
	if a, ended := m.c.anchors.join(key, &l.s, init); a == nil {
		n := &anchor{reentrantOwner: (*reentrantOwner)(m), key: key}
		// The first hold is adopted before the Watchdog shares the anchor.
		err := n.lease.startNest(ctx, m.c.wd, n, cfg, grant, r.Fence, from, r.PTTL, func() { init(n); l.s.AdoptFirst() })
		if err != nil {
			if err != errGrantExpired {
				rctx, cancel := detach(ctx, cfg.releaseTimeout)
				defer cancel()
				_ = h.release(rctx, member)
			}
			return nil, err
		}
		m.c.anchors.settle(n, ended, &l.s)
	}
	// The owner's other holds still queued join this one now: a grant
	// names one hold, so nothing else would tell them before their poll;
	// those in the local line would wait behind others for a lock their
	// owner holds.
	m.c.local.Pluck(h.lineKey(), h.sameOwner)
	m.c.notify.WakeMatching(m.keys.channel(), func(queued string) bool {
		return queued != member && isHoldOf(queued, h.owner)
	})
	return l, nil
}
