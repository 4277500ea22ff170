package protocol

import (
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/scripts"
)

// A Redlock sends each of these calls to every node itself, in parallel,
// and tallies the replies with one reader per script; the nodes' calls
// share the returned call's script and arguments, which drivers only read.

// RedlockAcquire is redlock_acquire.lua's call: it takes lock for owner for
// px, or reports the other owner (RedlockAcquireReply).
func RedlockAcquire(lock, owner string, px time.Duration) *Call {
	return ownedCall(scripts.RedlockAcquire, lock, owner, px.Milliseconds())
}

// RedlockAcquireWaiting is RedlockAcquire for a Lock that waits in the line
// called line, which has waited for waited: a node that finds the lock held
// lists line in lines, the hash of the lines waiting for lock, and its reply
// says whether line has waited longest of them.
func RedlockAcquireWaiting(lock, lines, owner string, px time.Duration, line string, waited time.Duration) *Call {
	c := ownedCall(scripts.RedlockAcquire, lock, owner, px.Milliseconds())
	c.keys[1], c.Keys = lines, c.keys[:2]
	c.next = line
	c.setArgs(&c.member, &c.n, &c.next, waited.Milliseconds())
	return c
}

// RedlockHeld is what redlock_acquire's reply says of a lock held by
// another owner: its remaining time, its owner value (empty from an older
// dlock's script, which did not send it), and whether the asking line has
// waited longest (Next).
type RedlockHeld struct {
	TTL    time.Duration
	Holder string
	Next   bool
}

// RedlockAcquireReply reads redlock_acquire's reply: granted, or what it
// says of the other owner.
func RedlockAcquireReply(reply any) (granted bool, held RedlockHeld, err error) {
	if reply == int64(1) {
		return true, held, nil
	}
	items, ok := reply.([]any)
	if !ok || len(items) == 0 {
		return false, held, errs.Unexpected(reply)
	}
	switch code, _ := items[0].(int64); code {
	case 0:
		if len(items) >= 2 {
			if ttl, ok := items[1].(int64); ok {
				held.TTL = Millis(ttl)
				if len(items) > 2 {
					held.Holder, _ = items[2].(string)
				}
				if len(items) > 3 {
					next, _ := items[3].(int64)
					held.Next = next == 1
				}
				return false, held, nil
			}
		}
	}
	return false, held, errs.Unexpected(reply)
}

// OwnedRelease is owned_release.lua's call: it deletes lock if owner holds
// it (reply 1; 0 when not), publishing the release to its waiters when
// tell is set.
func OwnedRelease(lock, owner string, tell bool) *Call {
	c := ownedCall(scripts.OwnedRelease, lock, owner, 0)
	c.setArgs(&c.member, Join(tell))
	return c
}

// OwnedTransfer is owned_transfer.lua's call: it passes lock from owner to
// next for px (reply 1; 0 when owner no longer holds it).
func OwnedTransfer(lock, owner, next string, px time.Duration) *Call {
	c := ownedCall(scripts.OwnedTransfer, lock, owner, px.Milliseconds())
	c.next = next
	c.setArgs(&c.member, &c.next, &c.n)
	return c
}

// OwnedPTTLCall is owned_pttl.lua's call for owner on lock, whose reply
// OwnedPTTLReply reads (OwnedPTTL runs it on one server).
func OwnedPTTLCall(lock, owner string) *Call {
	c := ownedCall(scripts.OwnedPTTL, lock, owner, 0)
	c.setArgs(&c.member)
	return c
}

// OwnedPTTLReply reads owned_pttl's reply: lock's remaining time if owner
// holds it, else errs.ErrNotHeld; errs.ErrKeyConflict for a key without an
// expiry.
func OwnedPTTLReply(reply any) (time.Duration, error) { return pttlReply(reply, errNoExpiry) }

// ownedCall is a call of script on lock for owner whose arguments are
// owner and then n.
func ownedCall(script *driver.Script, lock, owner string, n int64) *Call {
	c := &Call{member: owner, n: n}
	c.keys[0] = lock
	c.Script, c.Keys = script, c.keys[:1]
	c.setArgs(&c.member, &c.n)
	return c
}
