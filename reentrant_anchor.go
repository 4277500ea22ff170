package dlock

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/hold"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/protocol"
)

// reentrantOwner is the anchor's holder: the lock as held by one owner,
// renewed once for all its holds.
type reentrantOwner ReentrantMutex

var (
	_ batchRenewer = (*reentrantOwner)(nil)
	_ recorder     = (*reentrantOwner)(nil)
)

func (o *reentrantOwner) lockName() string { return o.name }

func (o *reentrantOwner) kind() Kind { return KindReentrant }

func (o *reentrantOwner) RenewCalls(owner string, px time.Duration, shorten bool) []*driver.Call {
	// The holds set lives and dies with the lock.
	return protocol.OwnedExtend(o.keys.lock, o.holds, owner, px, shorten).Batch()
}

func (o *reentrantOwner) RenewResult(calls []*driver.Call) error { return protocol.ExtendResult(calls) }

func (o *reentrantOwner) RecordCalls(owner string, age, retention time.Duration) []*driver.Call {
	return []*driver.Call{protocol.HeldRecord(o.keys.held, owner, age, retention)}
}

func (o *reentrantOwner) Renew(ctx context.Context, owner string, px time.Duration, shorten bool) error {
	return renewVia(ctx, o.c.drv, o, owner, px, shorten)
}

func (o *reentrantOwner) Remaining(ctx context.Context, owner string) (time.Duration, error) {
	return protocol.OwnedPTTL(ctx, o.c.drv, o.keys.lock, owner)
}

// release is never used: holds are released one by one through their own
// leases, and the anchor retires with the last of them.
func (o *reentrantOwner) release(context.Context, string) error { return nil }

// anchorKey identifies one grant of a reentrant lock to an owner: grant is
// the value the lock's key holds while it lasts (reentrantHold.grantValue).
type anchorKey struct{ lock, grant string }

// anchorOwner is a lock and one of its owner values.
type anchorOwner struct{ lock, owner string }

// owner is the owner value of k's grant (after its hold id).
func (k anchorKey) owner() anchorOwner {
	return anchorOwner{k.lock, k.grant[ownerid.IDLen:]}
}

// anchor is the owner's renewal of one grant: the parent lease of the
// grant's holds in this Client (hold.Lease's nesting), which ends with the
// last of them. It is its lease's holder, so that the lease's end reaches
// the set.
type anchor struct {
	*reentrantOwner
	key   anchorKey
	lease Lease // made with the anchor: one allocation for both
	// gone (guarded by the shard's mu) says the anchor ended before it
	// was put in the set, which must then not take it.
	gone bool
}

// forget takes a, which ended, out of its set.
func (a *anchor) forget() { a.c.anchors.shard(a.key.lock).forget(a) }

// anchorShards spreads a Client's anchors over mutexes by lock name:
// goroutines holding different locks do not queue for one mutex.
const anchorShards = 16

// anchorSet is a Client's anchors: for each grant of a reentrant lock to an
// owner of the Client, the anchor that renews it for its holds. A later
// grant to the same owner, after the earlier one vanished (ForceUnlock,
// eviction), has an anchor of its own: the earlier one's renewals fail, and
// its holds are lost.
type anchorSet struct {
	seed   maphash.Seed // spreads lock names over shards (init)
	shards [anchorShards]anchorShard
}

// init readies s for use.
func (s *anchorSet) init() { s.seed = maphash.MakeSeed() }

type anchorShard struct {
	mu      sync.Mutex
	anchors map[anchorKey]*anchor
	// owners counts the anchors of each lock and owner value, for owns.
	owners map[anchorOwner]int
	_      [40]byte // a cache line each
}

// shard is lock's shard.
func (s *anchorSet) shard(lock string) *anchorShard {
	return &s.shards[maphash.String(s.seed, lock)%anchorShards]
}

// join makes l, a hold's lease, a nested hold of key's live anchor, set
// up by init, and returns the anchor. Without one it returns nil, and the
// anchor of key that ended, if the set holds one, for settle.
func (s *anchorSet) join(key anchorKey, l *hold.Lease, init func(*anchor)) (a, ended *anchor) {
	old := s.shard(key.lock).get(key)
	if old == nil {
		return nil, nil
	}
	init(old)
	if l.Adopt() {
		return old, nil
	}
	return nil, old
}

// settle puts a, a new anchor that adopted l as its first hold, in the
// set in place of ended (join's), and returns the anchor l is on: another
// hold may have made one meanwhile, which l then joins, and a retires. A
// lease lost with a before it is returned comes back with a, as its loss.
func (s *anchorSet) settle(a, ended *anchor, l *hold.Lease) *anchor {
	sh := s.shard(a.key.lock)
	for expect := ended; ; {
		cur, ok := sh.insert(a, expect)
		if ok {
			return a
		}
		if cur != nil {
			if l.Readopt(&cur.lease.s) {
				a.lease.s.Retire()
				return cur
			}
			if a.lease.s.Lost() != nil {
				return a // l was lost with a, which the set must not take
			}
		}
		expect = cur // ended, or gone: a takes its place
	}
}

// get returns key's anchor, live or not.
func (sh *anchorShard) get(key anchorKey) *anchor {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.anchors[key]
}

// insert puts a in the set in place of expect, an anchor that ended (nil:
// none), unless another took its place meanwhile: then it returns that
// one. An anchor that ended before is not put in the set.
func (sh *anchorShard) insert(a, expect *anchor) (cur *anchor, ok bool) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if a.gone {
		return nil, true
	}
	if cur = sh.anchors[a.key]; cur != expect {
		return cur, false
	}
	if cur != nil {
		sh.deleteLocked(cur) // its own forget finds it gone
	}
	if sh.anchors == nil {
		sh.anchors = make(map[anchorKey]*anchor)
		sh.owners = make(map[anchorOwner]int)
	}
	sh.anchors[a.key] = a
	sh.owners[a.key.owner()]++
	return nil, true
}

// forget takes a, which ended, out of the set, or keeps the set from
// taking it.
func (sh *anchorShard) forget(a *anchor) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.anchors[a.key] == a {
		sh.deleteLocked(a)
	} else {
		a.gone = true
	}
}

func (sh *anchorShard) deleteLocked(a *anchor) {
	delete(sh.anchors, a.key)
	o := a.key.owner()
	if sh.owners[o]--; sh.owners[o] <= 0 {
		delete(sh.owners, o)
	}
}

// owns reports whether owner, an owner value, holds the lock: whether it
// has an anchor, which a grant's first hold makes and its last ends.
func (s *anchorSet) owns(lock, owner string) bool {
	sh := s.shard(lock)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.owners[anchorOwner{lock, owner}] > 0
}

// count is how many anchors s holds.
func (s *anchorSet) count() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.anchors)
		sh.mu.Unlock()
	}
	return n
}
