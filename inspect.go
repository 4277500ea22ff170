package dlock

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/glob"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/scripts"
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
	// name, 0 when it is no longer remembered, and for a Latch. The counter
	// is kept max(1h, 2×TTL) after the last grant, except for a Mutex,
	// whose uncontended grants do not push its expiry back (that would cost
	// them a command): its counter goes that long after it was made or
	// after the last grant that went through the queue. Tokens keep
	// increasing all the same: a counter made again starts from the
	// server's clock.
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
	keys = append(keys, c.ReentrantMutex(name).all...)
	keys = append(keys, newRWKeys(p, name).all...)
	keys = append(keys, newSemKeys(p, name).all...)
	keys = append(keys, c.Latch(name).key)
	return keys
}

func (c *Client) inspectCall(name string) *driver.Call {
	return &driver.Call{Script: scripts.Inspect, Keys: c.inspectKeys(name)}
}

// inspectKinds are the kinds in the order of inspect.lua's reply.
var inspectKinds = []Kind{KindMutex, KindReentrant, KindRWMutex, KindSemaphore, KindLatch}

// nameState is what inspect.lua found under one name: the LockInfos, and
// what ForceUnlock needs to release each holder as itself.
type nameState struct {
	name  string
	op    string // the operation that read it, for errors
	infos []LockInfo
	held  []heldBy
}

// heldBy is one holder as stored: enough to run its primitive's release
// script on its behalf.
type heldBy struct {
	kind    Kind
	member  string   // the owner value; for an RWMutex the mode byte, then it
	value   string   // what the lock's key holds, as GET shows it ("" for sets)
	owner   string   // its Holder.Owner, which ForceUnlockOwner matches
	info    string   // its Holder.Info
	holdIDs []string // a ReentrantMutex holder's holds
}

// parseInspect reads inspect.lua's reply for name: the only place that
// knows its shape.
func parseInspect(name string, call *driver.Call) (*nameState, error) {
	if call.Err != nil {
		return nil, call.Err
	}
	bad := func() (*nameState, error) { return nil, errs.Unexpected(call.Reply) }
	parts, ok := call.Reply.([]any)
	if !ok || len(parts) != len(inspectKinds) {
		return bad()
	}
	st := &nameState{name: name}
	for i, kind := range inspectKinds {
		part, ok := parts[i].([]any)
		if !ok {
			return bad()
		}
		if len(part) == 0 {
			continue // no state of this kind
		}
		if len(part) != 6 {
			return bad()
		}
		holders, ok1 := part[1].([]any)
		waiters, ok2 := part[2].([]any)
		nums, err := replyInts([]any{part[0], part[3], part[4], part[5]}, 4)
		if !ok1 || !ok2 || err != nil {
			return bad()
		}
		info := LockInfo{Name: name, Kind: kind, LastToken: nums[0]}
		switch kind {
		case KindSemaphore:
			info.Permits = int(nums[1])
		case KindLatch:
			info.Count, info.TTL = nums[2], ms(nums[3])
		}
		for _, h := range holders {
			f, ok := h.([]any)
			if !ok || len(f) != 5 {
				return bad()
			}
			member, ok1 := f[0].(string)
			ids, ok2 := f[4].([]any)
			v, err := replyInts(f[1:4], 3)
			if !ok1 || !ok2 || err != nil {
				return bad()
			}
			mode, owner, ok := splitMember(kind, member)
			if !ok {
				return bad()
			}
			hb := heldBy{kind: kind, member: member}
			switch kind {
			case KindMutex:
				hb.value = member
			case KindReentrant:
				hb.member, hb.value = owner, member // the key names the grant's hold too
			}
			for _, id := range ids {
				s, ok := id.(string)
				if !ok {
					return bad()
				}
				hb.holdIDs = append(hb.holdIDs, s)
			}
			holder := Holder{Mode: mode, Permits: int(v[1]), Token: v[2], TTL: ms(v[0])}
			holder.Owner, holder.Info = ownerid.Split(owner)
			hb.owner, hb.info = holder.Owner, holder.Info
			if kind == KindReentrant {
				holder.Holds = len(hb.holdIDs)
			}
			info.Holders = append(info.Holders, holder)
			st.held = append(st.held, hb)
		}
		// The holders sets are ordered by expiry; grant order reads better.
		sort.SliceStable(info.Holders, func(a, b int) bool { return info.Holders[a].Token < info.Holders[b].Token })
		for j, w := range waiters {
			f, ok := w.([]any)
			if !ok || len(f) != 3 {
				return bad()
			}
			member, ok1 := f[0].(string)
			v, err := replyInts(f[1:], 2)
			if !ok1 || err != nil {
				return bad()
			}
			mode, owner, ok := splitMember(kind, member)
			if !ok {
				return bad()
			}
			waiter := Waiter{Mode: mode, Permits: int(v[1]), Position: j + 1, LeaseLeft: ms(v[0])}
			waiter.Owner, waiter.Info = ownerid.Split(owner)
			info.Waiters = append(info.Waiters, waiter)
		}
		st.infos = append(st.infos, info)
	}
	return st, nil
}

// splitMember separates a holder's or waiter's member, as kind stores it,
// into its mode and owner value: an RWMutex member starts with its mode,
// and a ReentrantMutex waiter with its hold id, as its key does with the id
// of the hold that took the grant.
func splitMember(kind Kind, member string) (mode, owner string, ok bool) {
	switch kind {
	case KindRWMutex:
		if len(member) < 2 {
			return "", "", false
		}
		switch member[0] {
		case rwRead:
			return ModeRead, member[1:], true
		case rwWrite:
			return ModeWrite, member[1:], true
		}
		return "", "", false
	case KindReentrant:
		if len(member) <= ownerid.IDLen {
			return "", "", false
		}
		return "", member[ownerid.IDLen:], true
	}
	return "", member, member != ""
}

// List returns the state of every primitive whose name matches pattern, a
// Redis glob ("*" any characters, "?" one, "[...]" a class, "\" escapes;
// empty means every name), under the Client's key prefix: one LockInfo per
// name and kind, as Inspect returns them, sorted by name. Names are found
// with SCAN (on every master of a Cluster), so List walks the whole
// keyspace in steps and does not block the server; like SCAN it may miss a
// name created while it runs. Then each name is read atomically, in
// pipelined batches.
//
// A name whose keys hold something dlock did not write is left out; its
// error, matching ErrKeyConflict, is joined into the returned error, which
// comes with the LockInfos of every other name. Otherwise List returns
// ErrClosed, an error matching errors.ErrUnsupported when the Client's
// driver cannot list keys (it does not implement driver.Scanner), or the
// failure to reach Redis. It is safe for concurrent use.
func (c *Client) List(ctx context.Context, pattern string) ([]LockInfo, error) {
	if err := c.checkOpen("List", pattern); err != nil {
		return nil, err
	}
	scanner, ok := c.drv.(driver.Scanner)
	if !ok {
		return nil, errs.Errorf("dlock: List: %w: the driver %T cannot list keys (it does not implement driver.Scanner)",
			errors.ErrUnsupported, c.drv)
	}
	if pattern == "" {
		pattern = "*"
	}
	prefix := c.cfg.keyPrefix
	suffixes := c.keySuffixes()
	found := map[string]bool{}
	// The glob also matches names the pattern does not (its last "*" runs
	// into names containing '}'), so each name is matched again.
	match := glob.Escape(prefix) + "{" + pattern + "}*"
	err := scanner.Scan(ctx, match, func(key string) bool {
		if name, ok := nameOfKey(key, prefix, suffixes); ok && glob.Match(pattern, name) {
			found[name] = true
		}
		return true
	})
	if err != nil {
		return nil, errs.Errorf("dlock: List %q: %w", pattern, err)
	}
	names := make([]string, 0, len(found))
	for name := range found {
		names = append(names, name)
	}
	sort.Strings(names)

	var infos []LockInfo
	var conflicts []error
	const batch = 100 // names per pipelined round trip
	for len(names) > 0 {
		n := min(batch, len(names))
		calls := make([]*driver.Call, n)
		for i, name := range names[:n] {
			calls[i] = c.inspectCall(name)
		}
		c.drv.Run(ctx, calls...)
		for i, name := range names[:n] {
			st, err := parseInspect(name, calls[i])
			if err != nil {
				err = errs.Redis("List", name, err)
				if !errors.Is(err, ErrKeyConflict) {
					return nil, err
				}
				conflicts = append(conflicts, err)
				continue
			}
			infos = append(infos, st.infos...) // none if the name's keys expired meanwhile
		}
		names = names[n:]
	}
	return infos, errs.Join(conflicts...)
}

// keySuffixes returns what follows "<prefix>{<name>}" in the keys of every
// kind of primitive: "", ":fence", ":re", ":rw:q", ...
func (c *Client) keySuffixes() map[string]bool {
	const name = "n"
	base := c.cfg.keyPrefix + "{" + name + "}"
	suffixes := map[string]bool{}
	for _, k := range c.inspectKeys(name) {
		suffixes[strings.TrimPrefix(k, base)] = true
	}
	return suffixes
}

// nameOfKey returns the name whose key key is, if key is one of dlock's
// under prefix. A name may contain braces, but no suffix does, so the name
// ends at the key's last '}'.
func nameOfKey(key, prefix string, suffixes map[string]bool) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+"{")
	if !ok {
		return "", false
	}
	end := strings.LastIndexByte(rest, '}')
	if end < 0 || !suffixes[rest[end+1:]] {
		return "", false
	}
	name := rest[:end]
	if checkName(name) != nil {
		return "", false
	}
	return name, true
}

// ForceUnlock releases everything held under name, for operators: the
// holder of its Mutex (FairMutex, MultiLock), ReentrantMutex (every hold),
// RWMutex (every reader or the writer) and Semaphore (every acquisition).
// Latches are left alone: they hold nothing. Each release is the
// primitive's own, run on the holder's behalf, so the lock passes to its
// first waiters exactly as if the holder had released it; and each compares
// the owner, so a holder that changed since ForceUnlock read the name is
// left alone. It returns how many holders it released: 0 when nothing was
// held.
//
// The former holders are not told at once: each learns it at its next
// renewal (within a third of its TTL), when its Done closes and its Err
// matches ErrLockLost; its Unlock then returns ErrNotHeld. A holder without
// auto-renew learns it only when it calls Extend, TTL or Unlock, so it may
// keep working, unprotected, until then: fencing tokens exist for this.
//
// ForceUnlock returns ErrInvalidArgument for an invalid name,
// ErrKeyConflict, ErrClosed, or the failure to reach Redis (some holders
// may have been released by then: the count says how many). It is safe for
// concurrent use. ForceUnlockOwner releases one holder only.
func (c *Client) ForceUnlock(ctx context.Context, name string) (released int, err error) {
	st, err := c.inspect(ctx, "ForceUnlock", name)
	if err != nil {
		return 0, err
	}
	return c.forceRelease(ctx, st)
}

// ForceUnlockOwner is ForceUnlock restricted to one holder: it releases
// what owner holds under name and leaves every other holder alone (the
// other readers of an RWMutex, the other acquisitions of a Semaphore).
// owner is a Holder.Owner as Inspect reports it, which is also the
// holder's Lease.Owner or Permits.Owner, or the whole value the lock's key
// holds, "<Owner>;<Info>" (as redis-cli GET shows it), which must then
// match both; for a ReentrantMutex owner, every hold is released. As with ForceUnlock, each release is the primitive's
// own, run on the holder's behalf, so the lock passes to its waiters as on
// a normal release, and a holder that changed since ForceUnlockOwner read
// the name is left alone. It returns how many holders it released: 0 when
// owner holds nothing under name (a waiter holds nothing). The former
// holder learns it as after ForceUnlock: at its next renewal, its Done
// closes and its Err matches ErrLockLost.
//
// It also lets one process release a lock that another took, such as a job
// handed from the process that starts it to the one that finishes it.
// Process A takes the lock and passes the lease's Owner and Name to process
// B, which calls ForceUnlockOwner when the job is done, through a Client
// with the same key prefix (for a MultiLock, once for each of its names).
// A does not call Unlock: before B is done it would release the lock under
// B, and after, it returns ErrNotHeld. A then either:
//
//   - keeps the lease, and its Client open, until B is done. A's watchdog
//     renews the lock meanwhile, so it stays held as long as A's process
//     does; if A exits or closes its Client first, the lock expires one TTL
//     after A's last renewal, whether B is done or not. After B's release,
//     A's next renewal finds the lock gone or taken: A's lease ends as a
//     lost one (Done closes, Err matches ErrLockLost, and A's Observer and
//     logger report a loss); or
//   - takes the lock with WithAutoRenew(false) and a TTL that covers the
//     job, and may exit or Close its Client at once (Close releases
//     nothing). The lock is held until B releases it or the TTL runs out,
//     whichever comes first. A's lease, while A runs, ends when the TTL
//     elapses, with an Err matching ErrLockLost; of B's release it learns
//     only by calling Extend or TTL before then.
//
// Redlock leases cannot be released through a Client: their keys live on
// independent nodes. ForceUnlockOwner returns ErrInvalidArgument for an
// invalid name or an empty owner, and otherwise the errors of ForceUnlock.
// It is safe for concurrent use.
func (c *Client) ForceUnlockOwner(ctx context.Context, name, owner string) (released int, err error) {
	if owner == "" {
		return 0, errs.Errorf("dlock: ForceUnlockOwner %q: %w", name, errs.InvalidArgf("empty owner"))
	}
	st, err := c.inspect(ctx, "ForceUnlockOwner", name)
	if err != nil {
		return 0, err
	}
	id, info, whole := strings.Cut(owner, ";")
	st.held = slices.DeleteFunc(st.held, func(h heldBy) bool {
		return (h.owner != id || whole && h.info != info) && (!whole || h.value != owner)
	})
	return c.forceRelease(ctx, st)
}

// forceRelease releases the holders st found, each as itself.
func (c *Client) forceRelease(ctx context.Context, st *nameState) (int, error) {
	released := 0
	var failed []error
	for _, h := range st.held {
		ok, err := c.releaseAs(ctx, st, h)
		if err != nil {
			failed = append(failed, errs.Redis(st.op, st.name, err))
		}
		if ok {
			released++
		}
	}
	return released, errs.Join(failed...)
}

// releaseAs runs the release script of h's primitive as h's owner. It
// reports whether h still held it (and no longer does, or holds only what
// it gained since st was read).
func (c *Client) releaseAs(ctx context.Context, st *nameState, h heldBy) (bool, error) {
	var err error
	switch h.kind {
	case KindMutex:
		err = c.Mutex(st.name).release(ctx, h.member)
	case KindReentrant:
		m := c.ReentrantMutex(st.name)
		released := false
		for _, id := range h.holdIDs {
			// Not attached to an anchor: release only runs the script.
			hold := &reentrantHold{m: m, owner: h.member, hold: id}
			err = hold.release(ctx, id+h.member)
			if err != nil {
				break
			}
			released = true
		}
		if errors.Is(err, ErrNotHeld) {
			return released, nil
		}
		return released, err
	case KindRWMutex:
		rw := c.RWMutex(st.name)
		half := &rw.reader
		if h.member[0] == rwWrite {
			half = &rw.writer
		}
		err = half.release(ctx, h.member[1:])
	case KindSemaphore:
		s := c.Semaphore(st.name, semLimitHint(st))
		err = (&semAcquisition{s: s}).release(ctx, h.member)
	default:
		return false, nil
	}
	if errors.Is(err, ErrNotHeld) {
		return false, nil
	}
	return err == nil, err
}

// semLimitHint is the limit a forced semaphore release serves the queue
// with when SetPermits stored none: Redis does not know the permits the
// callers pass. Their limit is at least every held and every requested
// amount (a request above it is refused), so this never grants more than
// they would. When it is below their limit, waiters it leaves queued are
// served by their own next attempt, which uses theirs.
func semLimitHint(st *nameState) int {
	hint := 1
	for _, info := range st.infos {
		if info.Kind != KindSemaphore {
			continue
		}
		held := 0
		for _, h := range info.Holders {
			held += h.Permits
		}
		hint = max(hint, held, info.Permits)
		for _, w := range info.Waiters {
			hint = max(hint, w.Permits)
		}
	}
	return min(hint, MaxPermits)
}
