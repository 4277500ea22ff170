package dlock

import (
	"sort"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/protocol"
)

// inspectKinds are the kinds in the order of inspect.lua's reply.
var inspectKinds = []Kind{KindMutex, KindReentrant, KindRWMutex, KindSemaphore, KindLatch, KindElection}

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
	parts, ok := call.Reply.([]any)
	if !ok || len(parts) != len(inspectKinds) {
		return nil, errs.Unexpected(call.Reply)
	}
	st := &nameState{name: name}
	for i, kind := range inspectKinds {
		part, ok := parts[i].([]any)
		if !ok {
			return nil, errs.Unexpected(call.Reply)
		}
		if len(part) == 0 {
			continue // no state of this kind
		}
		if !st.parseKind(kind, part) {
			return nil, errs.Unexpected(call.Reply)
		}
	}
	return st, nil
}

// parseKind adds one kind's part of inspect.lua's reply to st; false for a
// malformed part.
func (st *nameState) parseKind(kind Kind, part []any) bool {
	if len(part) != 6 {
		return false
	}
	holders, ok1 := part[1].([]any)
	waiters, ok2 := part[2].([]any)
	nums, err := protocol.Ints([]any{part[0], part[3], part[4], part[5]}, 4)
	if !ok1 || !ok2 || err != nil {
		return false
	}
	info := LockInfo{Name: st.name, Kind: kind, LastToken: nums[0]}
	switch kind {
	case KindSemaphore:
		info.Permits = int(nums[1])
	case KindLatch:
		info.Count, info.TTL = nums[2], protocol.Millis(nums[3])
	}
	for _, h := range holders {
		holder, hb, ok := parseHolder(kind, h)
		if !ok {
			return false
		}
		info.Holders = append(info.Holders, holder)
		st.held = append(st.held, hb)
	}
	// The holders sets are ordered by expiry; grant order reads better.
	sort.SliceStable(info.Holders, func(a, b int) bool { return info.Holders[a].Token < info.Holders[b].Token })
	for j, w := range waiters {
		waiter, ok := parseWaiter(kind, w)
		if !ok {
			return false
		}
		waiter.Position = j + 1
		info.Waiters = append(info.Waiters, waiter)
	}
	st.infos = append(st.infos, info)
	return true
}

// parseHolder reads one holder of inspect.lua's reply: what Inspect shows,
// and what a forced release needs.
func parseHolder(kind Kind, h any) (Holder, heldBy, bool) {
	f, ok := h.([]any)
	if !ok || len(f) != 6 {
		return Holder{}, heldBy{}, false
	}
	member, ok1 := f[0].(string)
	ids, ok2 := f[4].([]any)
	v, err := protocol.Ints([]any{f[1], f[2], f[3], f[5]}, 4)
	if !ok1 || !ok2 || err != nil {
		return Holder{}, heldBy{}, false
	}
	mode, owner, ok := splitMember(kind, member)
	if !ok {
		return Holder{}, heldBy{}, false
	}
	hb := heldBy{kind: kind, member: member}
	switch kind {
	case KindMutex, KindElection:
		hb.value = member
	case KindReentrant:
		hb.member, hb.value = owner, member // the key names the grant's hold too
	}
	for _, id := range ids {
		s, ok := id.(string)
		if !ok {
			return Holder{}, heldBy{}, false
		}
		hb.holdIDs = append(hb.holdIDs, s)
	}
	holder := Holder{Mode: mode, Permits: int(v[1]), Token: v[2], TTL: protocol.Millis(v[0]), HeldFor: protocol.Millis(max(v[3], 0))}
	holder.Owner, holder.Info = ownerid.Split(owner)
	hb.owner, hb.info = holder.Owner, holder.Info
	if kind == KindReentrant {
		holder.Holds = len(hb.holdIDs)
	}
	return holder, hb, true
}

// parseWaiter reads one waiter of inspect.lua's reply; the caller sets its
// position.
func parseWaiter(kind Kind, w any) (Waiter, bool) {
	f, ok := w.([]any)
	if !ok || len(f) != 4 {
		return Waiter{}, false
	}
	member, ok1 := f[0].(string)
	v, err := protocol.Ints(f[1:], 3)
	if !ok1 || err != nil {
		return Waiter{}, false
	}
	mode, owner, ok := splitMember(kind, member)
	if !ok {
		return Waiter{}, false
	}
	waiter := Waiter{Mode: mode, Permits: int(v[1]), LeaseLeft: protocol.Millis(v[0]), WaitedFor: protocol.Millis(v[2])}
	waiter.Owner, waiter.Info = ownerid.Split(owner)
	return waiter, true
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
