package dlock

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/scripts"
)

// scriptCall is one script call of the RWMutex or the Semaphore made in a
// single allocation, as mutexCall is the Mutex's: the driver.Call, the
// slice Run's variadic parameter takes, and the arguments. member (the
// holder or waiter value) goes in by pointer, as do the descriptors'
// timings and channel: a string or an int64 put in an interface is an
// allocation of its own.
type scriptCall struct {
	oneCall
	args   [11]any
	member string
}

// oneCall is a driver.Call with the slice Run's variadic parameter takes,
// which would escape on its own: the first part of mutexCall and
// scriptCall.
type oneCall struct {
	call  driver.Call
	calls [1]*driver.Call
}

// run sends the call.
func (a *oneCall) run(ctx context.Context, drv driver.Driver) {
	a.calls[0] = &a.call
	drv.Run(ctx, a.calls[:]...)
}

// newScriptCall returns a call of script on keys for member. Its
// arguments are set through args, which points into the call.
func newScriptCall(script *driver.Script, keys []string, member string) *scriptCall {
	a := &scriptCall{member: member}
	a.call = driver.Call{Script: script, Keys: keys}
	return a
}

// setArgs makes args the call's arguments.
func (a *scriptCall) setArgs(args ...any) {
	n := copy(a.args[:], args)
	a.call.Args = a.args[:n]
}

// Pre-boxed publish commands: boxing the string PublishCommand returns
// allocates.
var (
	publishPlain   any = "PUBLISH"
	publishSharded any = "SPUBLISH"
)

// publishArg is drv's publish command as a script argument.
func publishArg(drv driver.Driver) any {
	if strings.EqualFold(drv.PublishCommand(), "SPUBLISH") {
		return publishSharded
	}
	return publishPlain
}

// ownedExtendCall re-arms key for px if owner holds it, shortening its
// life only when shorten is set.
func ownedExtendCall(key, owner string, px time.Duration, shorten bool) *driver.Call {
	return &driver.Call{Script: scripts.OwnedExtend, Keys: []string{key}, Args: extendArgs(shorten, owner, px.Milliseconds())}
}

// extendArgs returns the arguments of an extend script: args, followed by
// the flag that lets it shorten a hold when shorten is set.
func extendArgs(shorten bool, args ...any) []any {
	if shorten {
		return append(args, 1)
	}
	return args
}

// ownedExtendResult reads owned_extend replies: renewed only if every key
// was; ErrNotHeld wins over a transport failure, since it is final.
func ownedExtendResult(calls []*driver.Call) error {
	var failed error
	for _, c := range calls {
		if c.Err != nil {
			failed = c.Err
			continue
		}
		switch n, _ := c.Reply.(int64); n {
		case 1:
		case 0:
			return ErrNotHeld
		default:
			failed = errs.Unexpected(c.Reply)
		}
	}
	return failed
}

// ownedRemaining reads key's remaining time if owner holds it.
func ownedRemaining(ctx context.Context, d driver.Driver, key, owner string) (time.Duration, error) {
	return remainingVia(ctx, d, scripts.OwnedPTTL, []string{key}, owner, fmt.Errorf("%w: the key has no expiry", ErrKeyConflict))
}

// remainingVia runs a *_pttl script for member and reads its reply: the
// time left, ErrNotHeld (-3), or negative for any other negative reply
// (nil: that reply is unexpected).
func remainingVia(ctx context.Context, d driver.Driver, script *driver.Script, keys []string, member string, negative error) (time.Duration, error) {
	call := &driver.Call{Script: script, Keys: keys, Args: []any{member}}
	d.Run(ctx, call)
	if call.Err != nil {
		return 0, call.Err
	}
	n, ok := call.Reply.(int64)
	switch {
	case !ok:
		return 0, errs.Unexpected(call.Reply)
	case n == -3:
		return 0, ErrNotHeld
	case n < 0 && negative != nil:
		return 0, negative
	case n < 0:
		return 0, errs.Unexpected(call.Reply)
	}
	return ms(n), nil
}

func ms(n int64) time.Duration {
	// Saturate rather than overflow into a negative duration: a key can
	// carry a PTTL beyond what a Duration holds (FuzzRedlockReply).
	switch {
	case n > math.MaxInt64/int64(time.Millisecond):
		return math.MaxInt64
	case n < math.MinInt64/int64(time.Millisecond):
		return math.MinInt64
	}
	return time.Duration(n) * time.Millisecond
}

// reply3 reads the first three elements of an array reply as integers,
// without the slice replyInts allocates.
func reply3(reply any) (a, b, c int64, err error) {
	items, ok := reply.([]any)
	if !ok || len(items) < 3 {
		return 0, 0, 0, errs.Unexpected(reply)
	}
	var okA, okB, okC bool
	a, okA = items[0].(int64)
	b, okB = items[1].(int64)
	c, okC = items[2].(int64)
	if !okA || !okB || !okC {
		return 0, 0, 0, errs.Unexpected(reply)
	}
	return a, b, c, nil
}

// replyInts reads the first n elements of an array reply as integers.
func replyInts(reply any, n int) ([]int64, error) {
	items, ok := reply.([]any)
	if !ok || len(items) < n {
		return nil, errs.Unexpected(reply)
	}
	out := make([]int64, n)
	for i := range out {
		v, ok := items[i].(int64)
		if !ok {
			return nil, errs.Unexpected(reply)
		}
		out[i] = v
	}
	return out, nil
}
