package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/protocol"
)

// ErrNoLeader is returned by Election.Leader when nobody leads the
// election: nobody has campaigned, the last leader resigned or lost its
// lease, or a new leader has not published its value yet.
var ErrNoLeader = errors.New("dlock: no leader")

// MaxLeaderValueLen is the longest value a leader may publish.
const MaxLeaderValueLen = 64 << 10

// Election elects one leader among the processes that campaign for a name,
// and publishes the leader's value to anyone who asks or observes. It is a
// FairMutex with a record beside it: campaigners are served in arrival
// order, the leader's lease is renewed and its loss signalled as any
// lease's, and Term is the grant's fencing token. See docs/primitives.md,
// "Election".
type Election struct {
	m      *Mutex
	record string // the leader record, and the channel observers hear
	err    error
}

// LeaderInfo is an election's leader: the Value it published, its Term
// (strictly larger for every new leadership of the name) and its Owner, as
// Inspect reports a holder. The zero LeaderInfo means nobody leads.
type LeaderInfo struct {
	Value string
	Term  int64
	Owner string
}

// Election returns the election called name. opts set its lock's options
// (WithTTL, WithOwnerInfo, WithReplicaAck, ...); an invalid name or option
// is reported by every method, matching ErrInvalidArgument.
func (c *Client) Election(name string, opts ...Option) *Election {
	m := c.newMutex("Election", name, opts)
	base := electionBase(m.cfg.keyPrefix, name)
	m.keys = newLockKeysAt(base)
	c.makeFair(m, base+":g"+c.grantTag)
	return &Election{m: m, record: electionRecord(base), err: m.err}
}

// electionBase is the key of an election's lock: keys of its own beside
// the name's other kinds, in its hash slot.
func electionBase(prefix, name string) string { return prefix + "{" + name + "}:election" }

// electionRecord is the key of the leader record of the election whose
// lock is base, and the channel its changes are published on.
func electionRecord(base string) string { return base + ":leader" }

// Name returns the election's name.
func (e *Election) Name() string { return e.m.name }

// Campaign waits until the caller leads the election, publishing value,
// or ctx ends; the errors are Lock's. The caller must Resign the returned
// Leadership (or let it be lost) for the next campaigner to lead.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	if err := e.check("Campaign", value); err != nil {
		return nil, err
	}
	ctx, cancel := e.m.cfg.boundWait(ctx)
	defer cancel()
	l, err := e.m.c.acquire(ctx, e.m, &e.m.cfg, true) // as FairMutex.Lock
	if err != nil {
		return nil, err
	}
	ld := &Leadership{e: e, lease: l}
	if err := ld.proclaim(ctx, value); err != nil {
		rctx, cancel := detach(ctx, e.m.cfg.releaseTimeout)
		defer cancel()
		_ = l.Unlock(rctx)
		return nil, err
	}
	return ld, nil
}

func (e *Election) check(op, value string) error {
	switch {
	case e.err != nil:
		return e.err
	case len(value) > MaxLeaderValueLen:
		return errs.InvalidArgf("Election %q: %s: a value of %d bytes is longer than %d", e.m.name, op, len(value), MaxLeaderValueLen)
	}
	return e.m.c.checkOpen("Election", e.m.name)
}

// Leader returns the current leader, or ErrNoLeader when nobody leads.
func (e *Election) Leader(ctx context.Context) (LeaderInfo, error) {
	if err := e.check("Leader", ""); err != nil {
		return LeaderInfo{}, err
	}
	l, ok, err := protocol.ElectionLeader(ctx, e.m.c.drv, e.m.keys.lock, e.record)
	switch {
	case err != nil:
		return LeaderInfo{}, errs.Redis("Leader", e.m.name, err)
	case !ok:
		return LeaderInfo{}, fmt.Errorf("dlock: Election %q: %w", e.m.name, ErrNoLeader)
	}
	id, _ := ownerid.Split(l.Owner)
	return LeaderInfo{Value: l.Value, Term: l.Term, Owner: id}, nil
}

// Leadership is a won campaign: it lasts until Resign, or until its lease
// is lost (Done closes, Err says why). It is safe for concurrent use.
type Leadership struct {
	e     *Election
	lease *Lease
	mu    sync.Mutex
	value string
}

// Value returns the value the leader published last.
func (ld *Leadership) Value() string {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.value
}

// Term returns the leadership's term: the fencing token of its grant,
// strictly larger for every new leadership of the election's name. Pass it
// to what the leader writes to, as a lease's token.
func (ld *Leadership) Term() int64 { return ld.lease.Token() }

// Done returns a channel closed when the leadership ends: lost, or after
// Resign.
func (ld *Leadership) Done() <-chan struct{} { return ld.lease.Done() }

// Err returns nil while leading; an error matching ErrLockLost once the
// leadership is lost, or ErrNotHeld after Resign (as Lease.Err).
func (ld *Leadership) Err() error { return ld.lease.Err() }

// Proclaim publishes value as the leader's, only while still leading: it
// returns an error matching ErrNotHeld otherwise.
func (ld *Leadership) Proclaim(ctx context.Context, value string) error {
	e := ld.e
	if err := e.check("Proclaim", value); err != nil {
		return err
	}
	return ld.proclaim(ctx, value)
}

// proclaim is Proclaim once the value and the Client are checked.
func (ld *Leadership) proclaim(ctx context.Context, value string) error {
	e := ld.e
	if err := ld.lease.Err(); err != nil {
		return fmt.Errorf("dlock: Election %q: Proclaim: %w", e.m.name, err)
	}
	err := protocol.ElectionProclaim(ctx, e.m.c.drv, e.m.keys.lock, e.record, ld.lease.s.Owner(), value, ld.lease.Token())
	switch {
	case errors.Is(err, errs.ErrNotHeld):
		return fmt.Errorf("dlock: Election %q: Proclaim: %w: the election's lock is no longer this leader's", e.m.name, ErrNotHeld)
	case err != nil:
		return errs.Redis("Proclaim", e.m.name, err)
	}
	ld.mu.Lock()
	ld.value = value
	ld.mu.Unlock()
	return nil
}

// Resign ends the leadership: the record is withdrawn and the next
// campaigner, if any, leads at once. It returns ErrNotHeld when the
// leadership had already ended.
func (ld *Leadership) Resign(ctx context.Context) error {
	e := ld.e
	failed := protocol.ElectionResign(ctx, e.m.c.drv, e.m.keys.lock, e.record, ld.lease.s.Owner())
	// The lease is released whatever the withdrawal did: a record left
	// behind names an owner that no longer holds the lock, which Leader
	// never reports.
	err := ld.lease.Unlock(ctx)
	if err == nil && failed != nil {
		err = errs.Redis("Resign", e.m.name, failed)
	}
	return err
}
