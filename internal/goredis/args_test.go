package goredis

import (
	"reflect"
	"testing"

	"github.com/dlock-go/dlock/driver"
)

// A command line taken from the pool again must be exactly the one built
// fresh: nothing of the previous call's arguments may show through.
func TestReusedCommandLineMatchesAFreshOne(t *testing.T) {
	script := driver.NewScript("return 1")
	long := &driver.Call{Script: script, Keys: []string{"{a}1", "{a}2", "{a}3"}, Args: []any{"x", "y", "z", int64(4)}}
	short := &driver.Call{Script: script, Keys: []string{"{b}1"}, Args: []any{"w"}}
	for _, routed := range []bool{false, true} {
		for _, eval := range []bool{false, true} {
			a := getArgv()
			a.eval(long, eval, routed)
			putArgv(a)
			a = getArgv()
			got := a.eval(short, eval, routed)
			want := evalArgs(short, eval, routed)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("routed=%v eval=%v: reused line %v, fresh line %v", routed, eval, got, want)
			}
			putArgv(a)
		}
	}
}
