// Package wait holds the machinery a waiting acquire shares across kinds:
// the places a process's waiters keep together in a lock's queue, the
// subscription a wait makes beside its polls, and the delays between
// attempts.
package wait

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/protocol"
)

// Places: waiters' places kept together.
//
// A waiter holds its place in a lock's queue under a lease (the waiter
// lease), and renews it by asking again a third of the way in: one script
// call per waiter and refresh. A thousand goroutines waiting on one
// Semaphore, RWMutex, ReentrantMutex or FairMutex would so keep Redis
// answering a thousand polls a second while nothing changes. (The Mutex
// avoids this differently: its goroutines of one Client share one place,
// in a Line. These cannot: each keeps a place of its own, for a
// semaphore's concurrency, a read lock's sharing, a reentrant owner's own
// hold, a FairMutex's strict order.)
//
// So the waiters of one Client on one lock form a group. Its first member,
// the leader, waits as a lone waiter does: it asks again a third of the
// way into its lease, and just after the holder's key expires (in case the
// holder died: its attempt then hands the lock to the queue's head). After
// its own attempt it renews the others' leases, all in one call
// (queue_keep.lua). The others only wait for their grant: a wake-up on the
// lock's channel, or the keep's word that they left the queue (granted, or
// dropped), after which each asks for itself. Every half refresh a member
// checks, without a call, that the leader renewed its lease lately; one
// not renewed for half a refresh longer than the leader's pace (the leader
// is slow, or its calls fail) asks for itself again, with at
// least half its lease left. When the leader leaves, the next member leads
// from its next check on.
//
// Redis then sees two calls per Client, lock and refresh, however many of
// the Client's goroutines wait. For a lock whose key exists exactly while
// someone holds it (Place.Lock: a FairMutex's, a MultiLock name's), the
// leader also renews its own lease in the keep, which reads that key's
// PTTL: it attempts again only when the key is gone (a holder died, or a
// grant's claim window lapsed: no wake-up is published then) or when the
// keep fails, so Redis sees one call per Client and refresh.

// Place names a waiter's place in a lock's queue.
type Place struct {
	Queue, Waiters string // the lock's queue keys, in one Cluster slot
	Member         string // the waiter's entry in them
	// Lock, when set, is the lock's key, in the same slot, which exists
	// exactly while someone holds the lock: the leader then keeps its own
	// place too (KeepSelf).
	Lock string
}

// placeKey identifies the waiters that can be kept together: the same
// queue, renewed by the same lease at the same pace.
type placeKey struct {
	queue   string
	lease   time.Duration
	refresh time.Duration
}

// Places is a Client's groups of waiters.
type Places struct {
	mu     sync.Mutex
	groups map[placeKey]*group
}

type group struct {
	key           placeKey
	waiters, lock string
	members       []*Member // members[0] leads
}

// Member is one waiting goroutine's place in its group.
type Member struct {
	g      *group
	member string
	// Gone is signalled when a keep found the member no longer queued: it
	// asks for itself at once (its grant, or a place again).
	Gone chan struct{}
	// keptAt (guarded by Places.mu) is when the member's lease was
	// last renewed, by its own attempt or by the leader's keep: the time
	// the call was sent, on the monotonic clock. The call found the member
	// still queued, so not yet granted: no grant to it is earlier, and the
	// validity of a grant heard later may count from keptAt (Engine.Wait).
	keptAt time.Time
	// keptByLeader counts the leader's renewals of it (for tests).
	keptByLeader atomic.Int64
}

// Join adds a waiter to its lock's group.
func (p *Places) Join(spec Place, lease, refresh time.Duration) *Member {
	key := placeKey{queue: spec.Queue, lease: lease, refresh: refresh}
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.groups[key]
	if g == nil {
		if p.groups == nil {
			p.groups = make(map[placeKey]*group)
		}
		g = &group{key: key, waiters: spec.Waiters, lock: spec.Lock}
		p.groups[key] = g
	}
	m := &Member{g: g, member: spec.Member, Gone: make(chan struct{}, 1)} // keptAt: see kept
	g.members = append(g.members, m)
	return m
}

// Leave takes m out of its group; the next member leads.
func (p *Places) Leave(m *Member) {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := m.g
	for i, x := range g.members {
		if x == m {
			g.members = append(g.members[:i], g.members[i+1:]...)
			break
		}
	}
	if len(g.members) == 0 && p.groups[g.key] == g {
		delete(p.groups, g.key)
	}
}

// Leads reports whether m leads its group.
func (p *Places) Leads(m *Member) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(m.g.members) > 0 && m.g.members[0] == m
}

// followers returns the members m keeps, when m leads: every other one.
func (p *Places) followers(m *Member) []*Member {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := m.g
	if len(g.members) < 2 || g.members[0] != m {
		return nil
	}
	return append([]*Member(nil), g.members[1:]...)
}

// maxKeptPerCall bounds the members one queue_keep call renews: a Lua
// call's arguments are a stack, and one long script blocks the server.
const maxKeptPerCall = 500

// Keep renews the queue leases of the members leader keeps, in one
// round trip, and tells those no longer queued to ask for themselves. A
// failure is only logged: the members then ask for themselves once their
// lease has gone unrenewed too long (stale).
func (p *Places) Keep(ctx context.Context, drv driver.Driver, lease time.Duration, logger *slog.Logger, leader *Member) {
	if members := p.followers(leader); len(members) > 0 {
		p.keep(ctx, drv, lease, logger, leader, members, "")
	}
}

// KeepSelf is Keep with the leader's own place renewed in the same call,
// for a group whose Place names its Lock. ok reports that the leader is
// still queued with its lease renewed and that the lock is held for pttl
// more; otherwise the leader must attempt now.
func (p *Places) KeepSelf(ctx context.Context, drv driver.Driver, lease time.Duration, logger *slog.Logger, leader *Member) (pttl time.Duration, ok bool) {
	if leader.g.lock == "" {
		return 0, false
	}
	members := append([]*Member{leader}, p.followers(leader)...)
	kept, err := p.keep(ctx, drv, lease, logger, leader, members, leader.g.lock)
	if err != nil || !kept.Has(0) || kept.LockPTTL <= 0 {
		return 0, false
	}
	return kept.LockPTTL, true
}

// keep renews members' leases, maxKeptPerCall to a call, and returns the
// first call's reply, which reads lock's PTTL when lock is set.
func (p *Places) keep(ctx context.Context, drv driver.Driver, lease time.Duration, logger *slog.Logger, leader *Member, members []*Member, lock string) (protocol.Kept, error) {
	var (
		chunks [][]*Member // the members of each call
		calls  []*driver.Call
	)
	for start := 0; start < len(members); start += maxKeptPerCall {
		chunk := members[start:min(start+maxKeptPerCall, len(members))]
		chunks = append(chunks, chunk)
		calls = append(calls, protocol.QueueKeep(leader.g.key.queue, leader.g.waiters, lock, lease, len(chunk),
			func(i int) string { return chunk[i].member }))
		lock = "" // read once
	}
	sent := time.Now()
	drv.Run(ctx, calls...)
	var (
		first    protocol.Kept
		firstErr error
	)
	for i, call := range calls {
		chunk := chunks[i]
		kept, err := protocol.QueueKeepReply(call, len(chunk))
		if i == 0 {
			first, firstErr = kept, err
		}
		if err != nil {
			logger.Debug("dlock: renewing waiters' places failed; each asks for itself", slog.String("queue", leader.g.key.queue), slog.Any("error", err))
			continue
		}
		for j, m := range chunk {
			if kept.Has(j) {
				p.Kept(m, sent)
				if m != leader {
					m.keptByLeader.Add(1)
				}
				continue
			}
			if m == leader {
				continue // KeepSelf's caller attempts at once
			}
			select {
			case m.Gone <- struct{}{}:
			default:
			}
		}
	}
	return first, firstErr
}

// Kept records that m's lease was renewed by a call sent at.
func (p *Places) Kept(m *Member, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if at.After(m.keptAt) {
		m.keptAt = at
	}
}

// Since returns the latest time at which m was known not to be granted
// yet (keptAt), or from when that is later.
func (p *Places) Since(m *Member, from time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m.keptAt.After(from) {
		return m.keptAt
	}
	return from
}

// Stale reports whether m's lease has gone unrenewed for half a refresh
// longer than the leader's pace: m must then ask for itself.
func (p *Places) Stale(m *Member, refresh time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Since(m.keptAt) > refresh+refresh/2
}

// Members returns the group of queue's members, the leader first (for
// tests).
func (p *Places) Members(queue string) []*Member {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, g := range p.groups {
		if k.queue == queue {
			return append([]*Member(nil), g.members...)
		}
	}
	return nil
}

// KeptByLeader counts the leader's renewals of m (for tests).
func (m *Member) KeptByLeader() int64 { return m.keptByLeader.Load() }
