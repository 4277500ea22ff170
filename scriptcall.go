package dlock

import (
	"context"
	"strings"

	"github.com/dlock-go/dlock/driver"
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
