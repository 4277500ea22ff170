package protocol

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/scripts"
)

// LatchKeys are a latch's keys (latch_lib.lua): its count, its recent
// calls, the mark of a count taken to zero, and its round record.
type LatchKeys struct{ Count, Calls, Zero, Round string }

// LatchChange is a change of a latch by a call that its id makes happen
// once: the latch's TTL, how long it remembers the call, and how long its
// round record lives.
type LatchChange struct {
	ID                    string
	TTL, Memory, RoundTTL time.Duration
}

// LatchTrySet runs latch_try_set.lua: it sets the count to n when it is at
// zero, and reports whether it did.
func LatchTrySet(ctx context.Context, drv driver.Driver, k LatchKeys, n int64, ch LatchChange) (bool, error) {
	call := &driver.Call{
		Script: scripts.LatchTrySet,
		Keys:   []string{k.Count, k.Calls, k.Zero, k.Round},
		Args:   []any{n, ch.TTL.Milliseconds(), ch.ID, ch.Memory.Milliseconds(), ch.RoundTTL.Milliseconds()},
	}
	drv.Run(ctx, call)
	if call.Err != nil {
		return false, call.Err
	}
	set, ok := call.Reply.(int64)
	if !ok {
		return false, errs.Unexpected(call.Reply)
	}
	return set == 1, nil
}

// LatchCountDown runs latch_count_down.lua: it decrements the count,
// waking the latch's waiters (on its count key's channel) at zero.
func LatchCountDown(ctx context.Context, drv driver.Driver, k LatchKeys, ch LatchChange) error {
	call := &driver.Call{
		Script: scripts.LatchCountDown,
		Keys:   []string{k.Count, k.Calls, k.Zero, k.Round},
		Args: []any{ch.TTL.Milliseconds(), drv.PublishCommand(), k.Count, ch.ID, ch.Memory.Milliseconds(),
			ch.RoundTTL.Milliseconds()},
	}
	drv.Run(ctx, call)
	if call.Err != nil {
		return call.Err
	}
	if _, ok := call.Reply.(int64); !ok {
		return errs.Unexpected(call.Reply)
	}
	return nil
}

// LatchState is what latch_count.lua reads: the count, the key's remaining
// time, at zero whether a CountDown took it there, and the round record
// (the current round's epoch and zeros, then the previous one's).
type LatchState struct {
	N                                  int64
	PTTL                               time.Duration
	Zeroed                             bool
	Epoch, Zeros, PrevEpoch, PrevZeros int64
}

// LatchCount runs latch_count.lua.
func LatchCount(ctx context.Context, drv driver.Driver, k LatchKeys) (LatchState, error) {
	call := &driver.Call{Script: scripts.LatchCount, Keys: []string{k.Count, k.Zero, k.Round}}
	drv.Run(ctx, call)
	if call.Err != nil {
		return LatchState{}, call.Err
	}
	v, err := Ints(call.Reply, 7)
	if err != nil {
		return LatchState{}, err
	}
	return LatchState{
		N: v[0], PTTL: Millis(v[1]), Zeroed: v[2] == 1,
		Epoch: v[3], Zeros: v[4], PrevEpoch: v[5], PrevZeros: v[6],
	}, nil
}
