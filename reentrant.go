package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/scripts"
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
// Every Lock returns its own Lease, to be unlocked once. All holds of one
// owner share one renewal (the watchdog renews the lock once per owner, not
// per hold), share the fencing token of the grant, and are lost together.
// Holds are counted by id, so an acquire that is retried after a lost reply
// never counts twice. Waiters queue in arrival order and are handed the lock
// like Mutex waiters.
//
// A ReentrantMutex has keys of its own: a Mutex with the same name is a
// different lock.
type ReentrantMutex struct {
	c     *Client
	name  string
	cfg   config
	keys  lockKeys
	holds string   // the set of the holder's hold ids
	all   []string // the scripts' KEYS: the lock's keys, then holds
	err   error
}

// ReentrantMutex returns the reentrant lock called name. opts override the
// Client's defaults. It sends nothing and never fails: an invalid name or
// option is reported by the first TryLock or Lock.
func (c *Client) ReentrantMutex(name string, opts ...Option) *ReentrantMutex {
	cfg, err := c.lockConfig("ReentrantMutex", name, opts)
	all := keyFamily(cfg.keyPrefix, name, ":re", "", ":fence", ":q", ":w", ":holds")
	keys := lockKeys{lock: all[0], fence: all[1], queue: all[2], waiters: all[3]}
	return &ReentrantMutex{c: c, name: name, cfg: cfg, keys: keys, holds: all[4], all: all, err: err}
}

// Name returns the lock's name.
func (m *ReentrantMutex) Name() string { return m.name }

// Lock takes the lock for the owner that ctx carries (WithOwner), adding a
// hold when that owner holds it already, or waits as Mutex.Lock does. It
// returns ErrInvalidArgument when ctx carries no valid owner, and otherwise
// the errors of Mutex.Lock. The caller must Unlock the returned Lease.
func (m *ReentrantMutex) Lock(ctx context.Context) (*Lease, error) { return m.lock(ctx, true) }

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
	call := &driver.Call{Script: scripts.ReentrantHolds, Keys: []string{m.keys.lock, m.holds}, Args: []any{owner}}
	m.c.drv.Run(ctx, call)
	if call.Err != nil {
		return 0, errs.Redis("HoldCount", m.name, call.Err)
	}
	n, ok := call.Reply.(int64)
	if !ok {
		return 0, errs.Unexpected(call.Reply)
	}
	return int(n), nil
}

// owner returns the owner value of ctx's owner: the Client's instance id,
// so no other process shares it, the identity, and the owner info.
func (m *ReentrantMutex) owner(ctx context.Context) (string, error) {
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
		return m.c.instance + ":" + id + ";" + m.cfg.ownerInfo, nil // one allocation, not two
	}
	return m.c.instance + ":" + id, nil
}

func (m *ReentrantMutex) lock(ctx context.Context, wait bool) (*Lease, error) {
	if m.cfg.observer != nil && m.err == nil {
		op := "TryLock"
		if wait {
			op = "Lock"
		}
		return observeAcquire(ctx, &m.cfg, KindReentrant, m.name, op, func(ctx context.Context) (*Lease, error) {
			return m.lockUnobserved(ctx, wait)
		})
	}
	return m.lockUnobserved(ctx, wait)
}

func (m *ReentrantMutex) lockUnobserved(ctx context.Context, wait bool) (*Lease, error) {
	owner, err := m.owner(ctx)
	if err != nil {
		return nil, err
	}
	hold, err := ownerid.New("") // 128 random bits in hex
	if err != nil {
		return nil, err
	}
	// The queue entry, and the grant, name this hold: hold id + owner value.
	h := &reentrantHold{m: m, owner: owner, hold: hold}
	return m.c.acquireAs(ctx, h, &m.cfg, wait, hold+owner)
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
	// grant is the id of the hold that took the grant this hold joined,
	// from the attempt that granted it; "" when this hold took it (or was
	// handed it).
	grant    string
	anchor   *anchor // the owner's shared renewal, once the hold is granted
	attached bool    // counted in the anchor's holds
	onLoss   lossID  // the hold's loss callback on the anchor's lease
}

var (
	_ queuedLock = (*reentrantHold)(nil)
	_ leaseMaker = (*reentrantHold)(nil)
)

func (h *reentrantHold) lockName() string { return h.m.name }
func (h *reentrantHold) channel() string  { return h.m.keys.channel() }

// place: member is the hold id followed by the owner value (lockUnobserved).
func (h *reentrantHold) place(member string) placeSpec {
	return placeSpec{queue: h.m.keys.queue, waiters: h.m.keys.waiters, member: member}
}

func (h *reentrantHold) attempt(ctx context.Context, member string, queue bool) (attemptResult, error) {
	m := h.m
	h.grant = ""
	a := &mutexCall{owner: member}
	a.args = [5]any{&a.owner, &m.cfg.pxMillis, boolFlag(queue), lockMode(m.c.drv, false), &m.cfg.timings}
	a.call = driver.Call{Script: scripts.ReentrantAcquire, Keys: m.all, Args: a.args[:]}
	call := &a.call
	m.cfg.askAck(call)
	a.run(ctx, m.c.drv)
	if call.Err != nil {
		return attemptResult{}, call.Err
	}
	if fence, ok := call.Reply.(int64); ok { // the free lock taken: the fast path's bare fence
		if fence <= 0 {
			return attemptResult{}, errs.Unexpected(call.Reply)
		}
		return grantAcked(ctx, h, &m.cfg, member, call, attemptResult{granted: true, fence: fence, pttl: ms(m.cfg.pxMillis)})
	}
	v, err := replyInts(call.Reply, 3)
	if err != nil {
		return attemptResult{}, err
	}
	if v[0] == 1 {
		items := call.Reply.([]any) // replyInts checked it
		grant, ok := "", len(items) >= 5
		if ok {
			grant, ok = items[4].(string)
		}
		if !ok || len(grant) != ownerid.IDLen {
			return attemptResult{}, errs.Unexpected(call.Reply)
		}
		if grant != h.hold {
			h.grant = grant
		}
		return grantAcked(ctx, h, &m.cfg, member, call, attemptResult{granted: true, fence: v[1], pttl: ms(v[2])})
	}
	return attemptResult{pttl: ms(v[1]), lastFence: lastFenceAt(call.Reply, 3)}, nil
}

// release gives up this hold (or its place in the queue). When it was the
// owner's last hold the lock is released, or handed to the next waiter.
// The owner's anchor is renewed by the watchdog; while every hold on it is
// being released, its renewals stop (and one in flight is waited for)
// before the release that may be the owner's last is sent, so that no
// renewal follows the owner's last release, even when several goroutines
// release the owner's holds at the same moment.
func (h *reentrantHold) release(ctx context.Context, member string) error {
	if !h.attached {
		_, err := h.sendRelease(ctx, member)
		return err
	}
	anchors := &h.m.c.anchors
	err := anchors.beginRelease(ctx, h.anchor)
	ended := false
	if err == nil {
		ended, err = h.sendRelease(ctx, member)
	}
	if ended || err != nil {
		// Gone, or its lease ends lost with the failure (Lease.end), as
		// any lease whose release fails: either way it no longer counts
		// on the anchor, which may renew the owner's other holds for long
		// yet, and must not renew the lock for this one.
		h.attached = false
		h.anchor.lease.dropLoss(h.onLoss)
	}
	var failed error // the release may not have landed
	if !ended {
		failed = err
	}
	anchors.endRelease(h.anchor, ended, failed)
	return err
}

// sendRelease runs the release script; ended reports that the hold is gone
// (released, handed on, or no longer there).
func (h *reentrantHold) sendRelease(ctx context.Context, member string) (ended bool, err error) {
	m := h.m
	a := &mutexCall{owner: member}
	a.args[0], a.args[1], a.args[2] = &a.owner, lockMode(m.c.drv, false), &m.cfg.timings
	a.call = driver.Call{Script: scripts.ReentrantRelease, Keys: m.all, Args: a.args[:3]}
	call := &a.call
	a.run(ctx, m.c.drv)
	if call.Err != nil {
		// A release that freed the lock despite a foreign key ended the hold.
		return errs.ReleasedDespiteConflict(call.Err), call.Err
	}
	if code, ok := call.Reply.(int64); ok { // the fast path: the last hold released
		if code != 1 {
			return false, errs.Unexpected(call.Reply)
		}
		return true, nil
	}
	items, ok := call.Reply.([]any)
	if !ok || len(items) == 0 {
		return false, errs.Unexpected(call.Reply)
	}
	code, _ := items[0].(int64)
	switch code {
	case 0, 4:
		return true, notHeld(call)
	case 1, 3:
		return true, nil
	case 2:
		if len(items) < 4 { // a malformed reply must not panic (FuzzScriptReplies)
			return true, errs.Unexpected(call.Reply)
		}
		v, err := replyInts(items[:3], 3)
		next, ok := items[3].(string)
		if err != nil || !ok {
			return true, errs.Unexpected(call.Reply)
		}
		m.c.notify.Deliver(m.keys.channel(), next, v[1], ms(v[2]))
		return true, nil
	}
	return false, errs.Unexpected(call.Reply)
}

// renew, remaining: a hold's lease delegates Extend and TTL to its anchor
// (Lease.parent), so these serve only the anchor's holder, reentrantOwner,
// for the grant the hold joined.
func (h *reentrantHold) renew(ctx context.Context, _ string, px time.Duration, shorten bool) error {
	return renewVia(ctx, h.m.c.drv, (*reentrantOwner)(h.m), h.grantValue(), px, shorten)
}

func (h *reentrantHold) remaining(ctx context.Context, _ string) (time.Duration, error) {
	return ownedRemaining(ctx, h.m.c.drv, h.m.keys.lock, h.grantValue())
}

// grantValue is what the lock's key holds while the grant this hold joined
// lasts: the id of the hold that took it, then the owner value. Renewals
// and TTLs compare all of it, so they never act on a later grant of the
// same owner.
func (h *reentrantHold) grantValue() string {
	if h.grant != "" {
		return h.grant + h.owner
	}
	return h.hold + h.owner
}

// makeLease returns the Lease of a granted hold: a child of the anchor of
// the grant it joined, which the grant's first hold here creates.
func (h *reentrantHold) makeLease(ctx context.Context, cfg *config, member string, r attemptResult, from time.Time) (*Lease, error) {
	m := h.m
	grant := h.grantValue()
	anchor, err := m.c.anchors.attach(anchorKey{lock: m.keys.lock, grant: grant}, func() (*Lease, error) {
		return newLease(ctx, m.c.wd, (*reentrantOwner)(m), cfg, grant, r.fence, from, r.pttl)
	})
	if err != nil {
		if err != errGrantExpired {
			rctx, cancel := detach(ctx, cfg.releaseTimeout)
			defer cancel()
			_ = h.release(rctx, member)
		}
		return nil, err
	}
	h.anchor, h.attached = anchor, true
	// A nested hold carries its owner's grant's token. The server reports
	// the counter's value, which is 0 once the counter expired under an
	// owner that held the lock longer than its retention (renewals do not
	// push it back), so the anchor's token, from the grant, stands in.
	token := max(r.fence, anchor.lease.token)
	// The owner's other holds still queued join this one now: a grant
	// names one hold, so nothing else would tell them before their poll.
	m.c.notify.WakeMatching(m.keys.channel(), func(queued string) bool {
		return queued != member && isHoldOf(queued, h.owner)
	})
	l := &Lease{
		wd:        m.c.wd,
		h:         h,
		cfg:       cfg,
		owner:     member,
		token:     token,
		parent:    anchor.lease,
		ttl:       cfg.ttl,
		kind:      KindReentrant,
		grantedAt: time.Now(),
		heapIndex: -1,
	}
	h.onLoss = anchor.lease.onLoss(func(err error) { m.c.wd.lose(l, fmt.Sprintf("the owner's hold ended: %v", err)) })
	return l, nil
}

// reentrantOwner is the anchor's holder: the lock as held by one owner,
// renewed once for all its holds.
type reentrantOwner ReentrantMutex

var _ batchRenewer = (*reentrantOwner)(nil)

func (o *reentrantOwner) lockName() string { return o.name }

func (o *reentrantOwner) renewCalls(owner string, px time.Duration, shorten bool) []*driver.Call {
	// The holds set lives and dies with the lock.
	c := ownedExtendCall(o.keys.lock, owner, px, shorten)
	c.Keys = append(c.Keys, o.holds)
	return []*driver.Call{c}
}

func (o *reentrantOwner) renewResult(calls []*driver.Call) error { return ownedExtendResult(calls) }

func (o *reentrantOwner) renew(ctx context.Context, owner string, px time.Duration, shorten bool) error {
	return renewVia(ctx, o.c.drv, o, owner, px, shorten)
}

func (o *reentrantOwner) remaining(ctx context.Context, owner string) (time.Duration, error) {
	return ownedRemaining(ctx, o.c.drv, o.keys.lock, owner)
}

// release is never used: holds are released one by one through their own
// leases, and the anchor retires with the last of them.
func (o *reentrantOwner) release(context.Context, string) error { return nil }

// anchorKey identifies one grant of a reentrant lock to an owner: grant is
// the value the lock's key holds while it lasts (reentrantHold.grantValue).
type anchorKey struct{ lock, grant string }

// anchorSet is a Client's anchors: for each grant of a reentrant lock to an
// owner of the Client, the internal lease the watchdog renews, and how many
// holds hang on it. A later grant to the same owner, after the earlier one
// vanished (ForceUnlock, eviction), has an anchor of its own: the earlier
// one's renewals fail, and its holds are lost.
type anchorSet struct {
	mu      sync.Mutex
	anchors map[anchorKey]*anchor
}

type anchor struct {
	key   anchorKey
	lease *Lease
	// holds and releasing (guarded by anchorSet.mu) count the holds on the
	// anchor and those of them whose release is in flight.
	holds, releasing int
	// pauseMu orders the decisions to pause and resume the anchor's
	// renewals with the watchdog calls that carry them out; paused (guarded
	// by pauseMu) says the renewals are paused.
	pauseMu sync.Mutex
	paused  bool
}

// attach returns the live anchor for key, or makes one with create, and
// counts one more hold on it.
func (s *anchorSet) attach(key anchorKey, create func() (*Lease, error)) (*anchor, error) {
	if a := s.join(key); a != nil {
		return a, nil
	}
	l, err := create() // may claim the lock: a round trip, not under mu
	if err != nil {
		return nil, err
	}
	if a := s.join(key); a != nil {
		// Another hold made one meanwhile; it renews the same key.
		l.wd.retire(l)
		return a, nil
	}
	a := &anchor{key: key, lease: l, holds: 1}
	s.mu.Lock()
	if s.anchors == nil {
		s.anchors = make(map[anchorKey]*anchor)
	}
	s.anchors[key] = a
	s.mu.Unlock()
	l.onLoss(func(error) { s.forget(a) })
	return a, nil
}

// join counts one more hold on key's live anchor, if there is one.
func (s *anchorSet) join(key anchorKey) *anchor {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.anchors[key]; a != nil && a.lease.lossErr() == nil {
		a.holds++
		return a
	}
	return nil
}

// beginRelease counts one more release in flight on a. When every hold on
// a is then being released, any of these releases may be the owner's last:
// a's renewals stop (waiting for one in flight) before it is sent.
// endRelease resumes them when a release leaves a hold that is not being
// released. It fails when ctx ends while a renewal in flight is waited for;
// endRelease follows it either way.
func (s *anchorSet) beginRelease(ctx context.Context, a *anchor) error {
	a.pauseMu.Lock()
	defer a.pauseMu.Unlock()
	s.mu.Lock()
	a.releasing++
	pause := !a.paused && a.releasing >= a.holds && s.anchors[a.key] == a
	s.mu.Unlock()
	if !pause {
		return nil
	}
	err := a.lease.wd.beginUnlock(ctx, a.lease, true)
	switch {
	case err == nil:
		a.paused = true
	case isRenewalPending(err):
		return err
	}
	return nil // lost or retired meanwhile: the release finds out
}

// endRelease counts a release done, and with ended (the hold is gone) or
// failed (its release may not have landed) one hold less on a: the last
// hold retires a. A hold granted meanwhile keeps it: the
// anchor renews the key by owner, whichever grant put the owner there (and
// renews again if it was paused). When the last hold's release failed, the
// release may not have landed: a ends lost, unrenewed, and the lock expires
// within its TTL, as a Mutex's does after a failed release. (Counted on,
// the failed hold kept the lock renewed for as long as the process lived,
// with no Lease left to release it.)
func (s *anchorSet) endRelease(a *anchor, ended bool, failed error) {
	a.pauseMu.Lock()
	defer a.pauseMu.Unlock()
	s.mu.Lock()
	a.releasing--
	if ended || failed != nil {
		a.holds--
	}
	current := s.anchors[a.key] == a
	last := current && a.holds <= 0
	if last {
		delete(s.anchors, a.key)
	}
	resume := !last && a.paused && (a.holds > a.releasing || !current)
	s.mu.Unlock()
	wd := a.lease.wd
	switch {
	case last && failed != nil && a.paused:
		wd.endUnlock(a.lease, failed) // ends it lost
	case last && failed != nil:
		// Not retire, which would wait for the renewal in flight that a
		// silent server has kept from returning.
		wd.lose(a.lease, fmt.Sprintf("releasing the owner's last hold failed (%v), and the release may still reach Redis", failed))
	case last && a.paused:
		wd.endUnlock(a.lease, nil)
	case last:
		wd.retire(a.lease)
	case resume:
		wd.resume(a.lease)
	default:
		return
	}
	a.paused = false
}

func (s *anchorSet) forget(a *anchor) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.anchors[a.key] == a {
		delete(s.anchors, a.key)
	}
}
