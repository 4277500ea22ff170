package protocol

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/scripts"
)

// LimitError is a Semaphore script's refusal of a number out of range:
// sem_acquire's of more permits than the limit (DLOCK_LIMIT), and
// sem_set_permits's of a limit change that leaves the range (DLOCK_RANGE).
// It unwraps to the error reply.
type LimitError struct {
	// Limit is the limit in force; -1 when the reply does not say.
	Limit int64
	Reply *driver.ReplyError
}

func (e *LimitError) Error() string { return e.Reply.Error() }

func (e *LimitError) Unwrap() error { return e.Reply }

// limitError is err as a *LimitError when it is an error reply with
// marker; nil otherwise.
func limitError(err error, marker string) error {
	if err == nil {
		return nil // before errors.As, whose target escapes
	}
	var rerr *driver.ReplyError
	if !errors.As(err, &rerr) {
		return nil
	}
	i := strings.Index(rerr.Msg, marker)
	if i < 0 {
		return nil
	}
	e := &LimitError{Limit: -1, Reply: rerr}
	if f := strings.Fields(rerr.Msg[i+len(marker):]); len(f) > 0 {
		if v, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			e.Limit = v
		}
	}
	return e
}

// Pre-boxed sem_acquire.lua ARGV[4]: join the queue or not, then "+" when
// n is at most the permits the caller gave.
var (
	semJoinFits any = "1+"
	semJoinOver any = "1-"
	semOnlyFits any = "0+"
	semOnlyOver any = "0-"
)

// semJoin is sem_acquire.lua's ARGV[4].
func semJoin(queue, fits bool) any {
	switch {
	case queue && fits:
		return semJoinFits
	case queue:
		return semJoinOver
	case fits:
		return semOnlyFits
	}
	return semOnlyOver
}

// AppendSemSettings appends to b a Semaphore's settings as sem_acquire.lua
// and sem_release.lua take them, in one argument: its permits (the limit
// when none is stored), the timings in ms, and drv's publish command. It
// allocates only when b has too little room: settings take under 100
// bytes.
func AppendSemSettings(b []byte, drv driver.Driver, permits int, t *Timings) []byte {
	b = strconv.AppendInt(b, int64(permits), 10)
	for _, v := range [...]int64{t.LimitRetention, t.WaiterLease, t.ClaimWindow, t.FenceRetention} {
		b = append(b, ' ')
		b = strconv.AppendInt(b, v, 10)
	}
	b = append(b, ' ')
	return append(b, drv.PublishCommand()...)
}

// SemRelease runs sem_release.lua: it gives owner's permits back, all or
// all but keep (0: none kept), and serves the waiters that fit, or takes
// owner out of the queue; settings is AppendSemSettings's. Release.Held is what
// owner holds afterwards. It returns errs.ErrNotHeld when owner held no
// permits.
func SemRelease(ctx context.Context, drv driver.Driver, keys []string, owner string, settings *string, keep int, deliver Deliver) (Release, error) {
	c := newCall(scripts.SemRelease, keys, owner)
	c.setArgs(&c.member, settings)
	if keep > 0 {
		c.n = int64(keep)
		c.Args = append(c.Args, &c.n)
	}
	c.run(ctx, drv, Ack{})
	r := Release{Resent: c.Resent}
	if held, ok := c.Reply.(int64); ok && held == 1 && c.Err == nil {
		r.Held = 1 // the fast path: all given back, nobody waits
		return r, nil
	}
	held, err := semGrants(&c.Call, deliver)
	switch {
	case err != nil:
		return r, err
	case held <= 0:
		return r, errs.ErrNotHeld
	}
	r.Held = held
	return r, nil
}

// SemLimitChange is a change of a Semaphore's limit by sem_set_permits.lua:
// to V, or, with an ID, by V.
type SemLimitChange struct {
	V int
	// ID names an addition, which the script remembers for Memory in the
	// key Calls, so that the call sent again adds nothing; "" for a set.
	ID     string
	Calls  string
	Memory time.Duration
	// Permits is the limit when none is stored, Max the highest one.
	Permits, Max int
}

// SemSetPermits runs sem_set_permits.lua on a Semaphore's keys and returns
// the new limit, after telling deliver of the waiters it served. A change
// that leaves the range is a *LimitError.
func SemSetPermits(ctx context.Context, drv driver.Driver, keys []string, channel string, t *Timings, ch SemLimitChange, deliver Deliver) (int64, error) {
	call := &driver.Call{
		Script: scripts.SemSetPermits,
		Keys:   keys,
		Args:   []any{ch.V, &t.LimitRetention, &t.FenceRetention, drv.PublishCommand(), channel},
	}
	if ch.ID != "" {
		call.Keys = append(keys[:len(keys):len(keys)], ch.Calls)
		call.Args = append(call.Args, ch.Permits, ch.Max, ch.ID, ch.Memory.Milliseconds())
	}
	drv.Run(ctx, call)
	if err := limitError(call.Err, "DLOCK_RANGE "); err != nil {
		return 0, err
	}
	return semGrants(call, deliver)
}

// semGrants reads a reply of the form {head, fence, px, owner, ...} (the
// Semaphore's release and limit scripts): it tells deliver of each grant
// and returns head.
func semGrants(call *driver.Call, deliver Deliver) (int64, error) {
	if call.Err != nil {
		return 0, call.Err
	}
	items, ok := call.Reply.([]any)
	if !ok || len(items) == 0 || (len(items)-1)%3 != 0 {
		return 0, errs.Unexpected(call.Reply)
	}
	head, ok := items[0].(int64)
	if !ok {
		return 0, errs.Unexpected(call.Reply)
	}
	for i := 1; i < len(items); i += 3 {
		fence, ok1 := items[i].(int64)
		px, ok2 := items[i+1].(int64)
		owner, ok3 := items[i+2].(string)
		if !ok1 || !ok2 || !ok3 {
			return 0, errs.Unexpected(call.Reply)
		}
		deliver(owner, fence, Millis(px))
	}
	return head, nil
}

// SemAvailable runs sem_available.lua on a Semaphore's keys (holders,
// counts, limit): the limit in force (permits when none is stored) and the
// permits held.
func SemAvailable(ctx context.Context, drv driver.Driver, keys []string, permits int) (limit, used int64, err error) {
	call := &driver.Call{Script: scripts.SemAvailable, Keys: keys, Args: []any{permits}}
	drv.Run(ctx, call)
	if call.Err != nil {
		return 0, 0, call.Err
	}
	v, err := Ints(call.Reply, 2)
	if err != nil {
		return 0, 0, err
	}
	return v[0], v[1], nil
}
