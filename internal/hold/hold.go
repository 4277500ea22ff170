// Package hold is a lease's state machine (held, unlocking, released, lost),
// its validity, and the Watchdog: the one scheduler per Client that renews
// its leases in pipelined batches and declares a lease lost at its local
// validity deadline. The layer above embeds a Lease in its own (a Host:
// the lock it holds, a Holder, and what it hears of renewals and loss); a
// Lease's fields are read and written in this package only, under its
// Watchdog's mutex.
package hold

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
)

// MinTTL is the shortest hold an Extend leaves a lease: under a WithMaxHold
// cap nearer than this, the lease ends instead (dlock.MinTTL).
const MinTTL = 10 * time.Millisecond

// Holder is the lock side of a lease: how to renew it and read its
// remaining time. Each primitive implements it once.
type Holder interface {
	// Renew re-arms the hold for px: nil when renewed, errs.ErrNotHeld when
	// the hold is no longer owner's, or the failure. Unless shorten is set,
	// it never moves the hold's expiry on the server earlier (see
	// Lease.Extend).
	Renew(ctx context.Context, owner string, px time.Duration, shorten bool) error
	// Remaining returns the hold's remaining time on the server, or
	// errs.ErrNotHeld.
	Remaining(ctx context.Context, owner string) (time.Duration, error)
}

// BatchRenewer is a Holder whose renewal is a set of script calls on the
// Watchdog's driver, so that the Watchdog can pipeline many leases'
// renewals into one round trip. Holders that renew elsewhere (Redlock's
// nodes) only implement Holder.Renew.
type BatchRenewer interface {
	// RenewCalls returns the calls that re-arm the hold for px, as
	// Holder.Renew: one for a lock on one slot, one per slot for a lock
	// spanning several.
	RenewCalls(owner string, px time.Duration, shorten bool) []*driver.Call
	// RenewResult interprets finished RenewCalls like Holder.Renew.
	RenewResult(calls []*driver.Call) error
}

// Drifter is a Holder whose leases need another drift allowance than
// Drift: Redlock's drift factor is an option.
type Drifter interface {
	Drift(px time.Duration) time.Duration
}

// Host is the layer above's lease around a Lease: the lock it holds, and
// what it hears of renewals and loss. The Watchdog calls Lost, Renewed and
// RenewFailed after its mutex is released, so they may take their time and
// call back into the lease.
type Host interface {
	// Holder is the lock the lease holds.
	Holder() Holder
	// Name is the lock's name, for errors and logs.
	Name() string
	// Lost reports the lease's loss, after its loss callbacks ran.
	Lost(err error, reason string)
	// Renewed reports a renewal's outcome (nil: renewed).
	Renewed(err error)
	// RenewFailed reports a failed renewal to be retried, with the time
	// the lease still has.
	RenewFailed(err error, validFor time.Duration)
}

// Settings are what a lease takes from its lock's options.
type Settings struct {
	TTL       time.Duration // the expiry each renewal asks for
	AutoRenew bool          // the Watchdog renews the lease
	MaxHold   time.Duration // the cap on the whole hold; 0: none
	// Replicas is how many replicas must acknowledge a renewal (WAIT),
	// within ReplicaTimeout; 0: none.
	Replicas       int
	ReplicaTimeout time.Duration
}

// ErrReleased is Err's answer for a lease that Unlock released.
var ErrReleased = fmt.Errorf("%w: released by Unlock", errs.ErrNotHeld)

// askAck asks for WAIT for replicas after each of calls, within timeout;
// replicas 0 asks for none.
func askAck(replicas int, timeout time.Duration, calls ...*driver.Call) {
	if replicas <= 0 {
		return
	}
	for _, call := range calls {
		call.Replicas, call.ReplicaTimeout = replicas, timeout
	}
}

// ackErr reports the first of calls whose writes reached fewer replicas
// than it asked WAIT for. Calls that failed, or asked for no WAIT, pass.
func ackErr(calls ...*driver.Call) error {
	for _, call := range calls {
		if call.Replicas > 0 && call.Err == nil && call.Acked < call.Replicas {
			return TooFewAcks(call.Acked, call.Replicas, call.ReplicaTimeout)
		}
	}
	return nil
}

// TooFewAcks is the error, matching errs.ErrReplicaAck, of a write that
// acked of replicas acknowledged within timeout: a grant's or a renewal's.
func TooFewAcks(acked, replicas int, timeout time.Duration) error {
	return fmt.Errorf("%w: %d of %d replicas acknowledged it within %v",
		errs.ErrReplicaAck, acked, replicas, timeout)
}
