package protocol

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/scripts"
)

// The extend scripts re-arm a hold for px; their calls are built apart
// from reading their replies (ExtendResult) because the watchdog runs many
// in one batch. Each call is one allocation.

// OwnedExtend is owned_extend.lua's call: it re-arms lock for px if owner
// holds it, and holds (a ReentrantMutex's holds set; "" for none) with it,
// shortening the hold only when shorten is set.
func OwnedExtend(lock, holds, owner string, px time.Duration, shorten bool) *Call {
	c := ownedCall(scripts.OwnedExtend, lock, owner, px.Milliseconds())
	if holds != "" {
		c.keys[1] = holds
		c.Keys = c.keys[:2]
	}
	c.extendArgs(shorten)
	return c
}

// RWExtend is rw_extend.lua's call: it re-arms member's hold of an RWMutex
// (keys: holders, tokens) as OwnedExtend does.
func RWExtend(keys []string, member string, px time.Duration, shorten bool) *Call {
	c := newCall(scripts.RWExtend, keys, member)
	c.n = px.Milliseconds()
	c.extendArgs(shorten)
	return c
}

// SemExtend is sem_extend.lua's call: it re-arms owner's permits of a
// Semaphore (keys: holders, counts, limit) as OwnedExtend does, and the
// stored limit for limitRetention ms.
func SemExtend(keys []string, owner string, px time.Duration, limitRetention *int64, shorten bool) *Call {
	c := newCall(scripts.SemExtend, keys, owner)
	c.n = px.Milliseconds()
	c.extendArgs(shorten, limitRetention)
	return c
}

// extendArgs sets an extend script's arguments: the member, px, then more,
// followed by the flag that lets it shorten a hold when shorten is set.
func (c *Call) extendArgs(shorten bool, more ...any) {
	var room [4]any // on the stack: setArgs copies into the Call
	args := append(append(room[:0], &c.member, &c.n), more...)
	if shorten {
		args = append(args, 1)
	}
	c.setArgs(args...)
}

// ExtendResult reads the replies of extend calls: renewed only if every
// hold was; errs.ErrNotHeld wins over a transport failure, since it is
// final.
func ExtendResult(calls []*driver.Call) error {
	var failed error
	for _, c := range calls {
		if c.Err != nil {
			failed = c.Err
			continue
		}
		switch n, _ := c.Reply.(int64); n {
		case 1:
		case 0:
			return errs.ErrNotHeld
		default:
			failed = errs.Unexpected(c.Reply)
		}
	}
	return failed
}

// HeldRecord is held_record.lua's call: it records in the held-since hash
// key that member's hold began age ago, for retention.
func HeldRecord(key, member string, age, retention time.Duration) *driver.Call {
	return &driver.Call{Script: scripts.HeldRecord, Keys: []string{key},
		Args: []any{member, max(age.Milliseconds(), 1), retention.Milliseconds()}}
}

// errNoExpiry is owned_pttl's answer for a key without an expiry.
var errNoExpiry = fmt.Errorf("%w: the key has no expiry", errs.ErrKeyConflict)

// OwnedPTTL runs owned_pttl.lua: lock's remaining time if owner holds it,
// else errs.ErrNotHeld; errs.ErrKeyConflict for a key without an expiry.
func OwnedPTTL(ctx context.Context, drv driver.Driver, lock, owner string) (time.Duration, error) {
	return OwnedPTTLCall(lock, owner).pttl(ctx, drv, errNoExpiry)
}

// RWPTTL runs rw_pttl.lua: the remaining time of member's hold of the
// RWMutex whose holders key is holders, else errs.ErrNotHeld.
func RWPTTL(ctx context.Context, drv driver.Driver, holders, member string) (time.Duration, error) {
	return ownedCall(scripts.RWPTTL, holders, member, 0).pttl(ctx, drv, nil)
}

// SemPTTL runs sem_pttl.lua: the remaining time of owner's permits of the
// Semaphore (keys: holders, counts), else errs.ErrNotHeld.
func SemPTTL(ctx context.Context, drv driver.Driver, keys []string, owner string) (time.Duration, error) {
	return newCall(scripts.SemPTTL, keys, owner).pttl(ctx, drv, nil)
}

// pttl runs a *_pttl call for c.member (its only argument) and reads its
// reply (pttlReply).
func (c *Call) pttl(ctx context.Context, drv driver.Driver, negative error) (time.Duration, error) {
	c.setArgs(&c.member)
	c.run(ctx, drv, Ack{})
	if c.Err != nil {
		return 0, c.Err
	}
	return pttlReply(c.Reply, negative)
}

// pttlReply reads a *_pttl script's reply: the time left, errs.ErrNotHeld
// (-3), or negative for any other negative reply (nil: that reply is
// unexpected).
func pttlReply(reply any, negative error) (time.Duration, error) {
	n, ok := reply.(int64)
	switch {
	case !ok:
		return 0, errs.Unexpected(reply)
	case n == -3:
		return 0, errs.ErrNotHeld
	case n < 0 && negative != nil:
		return 0, negative
	case n < 0:
		return 0, errs.Unexpected(reply)
	}
	return Millis(n), nil
}

// ReentrantHolds runs reentrant_holds.lua: how many holds owner has on a
// ReentrantMutex (keys: lock, holds); 0 when another owner or nobody holds
// it.
func ReentrantHolds(ctx context.Context, drv driver.Driver, lock, holds, owner string) (int64, error) {
	call := &driver.Call{Script: scripts.ReentrantHolds, Keys: []string{lock, holds}, Args: []any{owner}}
	drv.Run(ctx, call)
	if call.Err != nil {
		return 0, call.Err
	}
	n, ok := call.Reply.(int64)
	if !ok {
		return 0, errs.Unexpected(call.Reply)
	}
	return n, nil
}

// Inspect is inspect.lua's call on keys, every primitive's under one name
// (Client.inspectKeys has their order); the caller runs it, alone or in a
// batch, and reads its reply.
func Inspect(keys []string) *driver.Call {
	return &driver.Call{Script: scripts.Inspect, Keys: keys}
}
