package protocol

import (
	"context"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/scripts"
)

// An election is a FairMutex's keys and a leader record beside them: its
// scripts take the lock's key and the record's.

// Leader is an election's leader record: the leader's owner value, its
// term (the grant's fencing token) and the value it published.
type Leader struct {
	Owner string
	Term  int64
	Value string
}

// ElectionLeader runs election_leader.lua: the leader, or ok false when
// nobody leads (the lock is free, or its holder has published nothing
// yet).
func ElectionLeader(ctx context.Context, drv driver.Driver, lock, record string) (l Leader, ok bool, err error) {
	call := &driver.Call{Script: scripts.ElectionLeader, Keys: []string{lock, record}}
	drv.Run(ctx, call)
	if call.Err != nil {
		return Leader{}, false, call.Err
	}
	if n, isInt := call.Reply.(int64); isInt && n == 0 {
		return Leader{}, false, nil
	}
	items, isArray := call.Reply.([]any)
	if !isArray || len(items) < 3 {
		return Leader{}, false, errs.Unexpected(call.Reply)
	}
	l.Owner, _ = items[0].(string)
	l.Term, _ = items[1].(int64)
	l.Value, _ = items[2].(string)
	return l, true, nil
}

// ElectionProclaim runs election_proclaim.lua: it publishes value as the
// leader owner's, for its term, only while the lock is owner's; otherwise
// errs.ErrNotHeld.
func ElectionProclaim(ctx context.Context, drv driver.Driver, lock, record, owner, value string, term int64) error {
	call := &driver.Call{Script: scripts.ElectionProclaim, Keys: []string{lock, record},
		Args: []any{owner, value, term, publishArg(drv)}}
	drv.Run(ctx, call)
	switch n, _ := call.Reply.(int64); {
	case call.Err != nil:
		return call.Err
	case n == 0:
		return errs.ErrNotHeld
	case n != 1:
		return errs.Unexpected(call.Reply)
	}
	return nil
}

// ElectionResign runs election_resign.lua: it withdraws owner's leader
// record, if it is owner's, and tells the observers. Only a failure to
// run it is an error.
func ElectionResign(ctx context.Context, drv driver.Driver, lock, record, owner string) error {
	call := &driver.Call{Script: scripts.ElectionResign, Keys: []string{lock, record},
		Args: []any{owner, publishArg(drv)}}
	drv.Run(ctx, call)
	return call.Err
}
