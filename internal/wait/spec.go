package wait

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
)

// Result is the outcome of one acquire attempt.
type Result struct {
	Granted bool
	Fence   int64
	// pttl is the remaining time of owner's key when granted, and of the
	// holder's key otherwise.
	PTTL time.Duration
	// grantedAtUs is, for a grant handed over by a release, when it was
	// made in µs (notify.Grant.AtUs; a local hand-off's transfer reply); 0
	// otherwise.
	GrantedAtUs int64
	// queuedAhead says, when not granted, why although enough was free:
	// others waiting first come first (a Semaphore's arrival order, an
	// RWMutex's waiting writer). "" otherwise.
	QueuedAhead string
	// lastFence is, when not granted, the last fencing token the lock had
	// issued when the server ran the attempt: a grant heard afterwards with
	// a token no higher was made before the attempt (see Engine.Wait).
	LastFence int64
}

// Owner is what the waits for one owner value know about it, kept
// across the Wait calls made for that owner: a Lock that waits again
// after a grant it could not claim, a local waiter that takes over its
// head's place in a Line. A new Wait call must not forget it: a grant
// to the owner heard late, or heard twice (a release delivers it both from
// its reply and by pub/sub), would pass for new.
type Owner struct {
	// since is no later than any grant to the owner not yet ruled out: the
	// start of the last attempt that found the lock taken, or of the wait.
	Since time.Time
	// lastFence is the highest token that such an attempt saw issued, or
	// that a grant the owner could not claim carried: a grant with a token
	// no higher is over (see Engine.Wait).
	LastFence int64
	// answered: Redis answered an attempt (errs.ErrNoAnswer otherwise).
	Answered bool
	// pending are attempts for the owner that were still on their way
	// when their caller stopped waiting (driver.InFlightError): its
	// clean-up waits for them (abandon).
	Pending []<-chan struct{}
}

// GrantExpired rules out a grant to the owner that expired before it was
// claimed, and any copy of it heard later.
func (o *Owner) GrantExpired(fence int64) {
	o.LastFence = max(o.LastFence, fence)
	o.Answered = true
}

// NoteInFlight keeps the Done of an attempt err says is still on its way.
func (o *Owner) NoteInFlight(err error) {
	if done := errs.InFlightDone(err); done != nil {
		o.Pending = append(o.Pending, done)
	}
}

// Spec describes one wait for Engine.Wait.
type Spec struct {
	Name    string // for errors and logs
	Verb    string // the operation, for errors: "Lock" when empty
	Channel string // where wake-ups for this wait are published
	// Owner is who grants are addressed to on channel; a wait for a
	// condition (no grant) still needs a unique one.
	Owner string
	// State is what earlier waits for owner learnt; nil for a wait of its
	// own. Wait keeps it up to date.
	State *Owner
	// Attempt asks the server; Granted ends the wait. A queued primitive
	// also joins or refreshes its place in the queue here.
	Attempt func(ctx context.Context) (Result, error)
	// Abandon cleans up after a wait that ends without success; cause is
	// the error that ended it, nil for the context or Close. Attempts
	// still on their way are in State.Pending. May be nil.
	Abandon func(cause error)
	// First, when set, is an attempt already made (not granted) before the
	// wait: Wait starts from its outcome instead of attempting again.
	First *First
	// NoteErr, when set, hears each failure Wait retries, and nil once
	// an attempt succeeds again (a queue's head tells the waiters behind it).
	NoteErr func(error)
	// Place, when set, is the waiter's place in the lock's queue, which
	// attempt joins or refreshes: it is kept with the Client's other
	// waiters on the lock (places.go).
	Place *Place
}

// First is an attempt made before Wait registered its waiter.
type First struct {
	Result    Result
	Err       error
	Start     time.Time
	Confirmed bool // the channel's subscription was in place before it
}
