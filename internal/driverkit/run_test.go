package driverkit

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/driver"
)

// cancelledDial returns the error of a dial whose context was cancelled.
func cancelledDial(t *testing.T) error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := (&net.Dialer{}).DialContext(ctx, "tcp", "127.0.0.1:1")
	if err == nil {
		t.Fatal("a dial with a cancelled context succeeded")
	}
	return err
}

func TestDialCancelledByOther(t *testing.T) {
	live := context.Background()
	dead, cancel := context.WithCancel(live)
	cancel()
	dialErr := cancelledDial(t)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"another caller's cancelled dial", live, dialErr, true},
		{"another caller's cancelled handshake", live, context.Canceled, true},
		{"another caller's handshake past its deadline", live, context.DeadlineExceeded, true},
		{"our own cancelled handshake", dead, context.Canceled, false},
		{"our own cancelled dial", dead, dialErr, false},
		{"refused dial", live, &net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
		{"cancelled read", live, &net.OpError{Op: "read", Err: context.Canceled}, false},
		{"no error", live, nil, false},
	} {
		if got := dialCancelledByOther(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: dialCancelledByOther = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestCallsSurviveAnotherCallersCancelledDial: a call whose connection's
// dial another caller cancelled is sent again, alone or in a batch, and
// gets its own reply.
func TestCallsSurviveAnotherCallersCancelledDial(t *testing.T) {
	dialErr := cancelledDial(t)
	fails := 0
	lib := Lib[string]{
		EvalSha: func(c *driver.Call) string { return "evalsha " + c.Keys[0] },
		Eval:    func(c *driver.Call) string { return "eval " + c.Keys[0] },
		Wait:    func(c *driver.Call) string { return "wait" },
	}
	noScript := false // EVALSHA answers NOSCRIPT
	reply := func(cmd string) Result {
		if fails > 0 {
			fails--
			return Result{Err: dialErr}
		}
		if noScript && strings.HasPrefix(cmd, "evalsha") {
			return Result{Err: &driver.ReplyError{Msg: "NOSCRIPT No matching script"}}
		}
		return Result{Reply: cmd}
	}
	lib.Do = func(_ context.Context, cmd string) Result { return reply(cmd) }
	lib.DoMulti = func(_ context.Context, cmds []string, out []Result) {
		for i, cmd := range cmds {
			out[i] = reply(cmd)
		}
	}
	lib.SharedDial = true
	d := New(lib)
	ctx := context.Background()

	fails = maxDialResends
	one := &driver.Call{Script: driver.NewScript("return 1"), Keys: []string{"a"}}
	d.Run(ctx, one)
	if one.Err != nil || one.Reply != "evalsha a" {
		t.Errorf("one call: Reply, Err = %v, %v; want evalsha a, nil", one.Reply, one.Err)
	}

	fails = 1 // the first call of the batch
	a := &driver.Call{Script: driver.NewScript("return 1"), Keys: []string{"a"}}
	b := &driver.Call{Script: driver.NewScript("return 1"), Keys: []string{"b"}}
	d.Run(ctx, a, b)
	if a.Err != nil || a.Reply != "evalsha a" || b.Err != nil || b.Reply != "evalsha b" {
		t.Errorf("batch: got (%v, %v) and (%v, %v)", a.Reply, a.Err, b.Reply, b.Err)
	}

	// Dials cancelled, then NOSCRIPT: the EVAL fallback still comes.
	fails, noScript = 2*maxDialResends/3, true
	a.Reply, b.Reply = nil, nil
	d.Run(ctx, a, b)
	if a.Err != nil || a.Reply != "eval a" || b.Err != nil || b.Reply != "eval b" {
		t.Errorf("batch after cancelled dials and NOSCRIPT: got (%v, %v) and (%v, %v)", a.Reply, a.Err, b.Reply, b.Err)
	}
	noScript = false

	fails = maxDialResends + 1 // more than the driver resends: the error reaches the caller
	gone := &driver.Call{Script: driver.NewScript("return 1"), Keys: []string{"c"}}
	d.Run(ctx, gone)
	if !errors.Is(gone.Err, context.Canceled) {
		t.Errorf("after %d failed sends: Err = %v, want the dial's error", maxDialResends+1, gone.Err)
	}
}
