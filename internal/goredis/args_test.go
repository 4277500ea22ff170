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
			got := a.eval(short, eval, routed).args
			want := new(argv).eval(short, eval, routed).args
			if !reflect.DeepEqual(got, want) {
				t.Errorf("routed=%v eval=%v: reused line %v, fresh line %v", routed, eval, got, want)
			}
			putArgv(a)
		}
	}
}

// TestScriptArgCountsWrites: go-redis writes a command's arguments once per
// sending, so the script argument's count tells a command sent again.
func TestScriptArgCountsWrites(t *testing.T) {
	c := &driver.Call{Script: driver.NewScript("return 1")}
	a := getArgv()
	defer putArgv(a)
	args := a.eval(c, false, false).args
	m, ok := args[1].(interface{ MarshalBinary() ([]byte, error) })
	if !ok {
		t.Fatalf("the script argument %T is not written through MarshalBinary", args[1])
	}
	if b, _ := m.MarshalBinary(); string(b) != c.Script.Hash() || a.script.resent() {
		t.Fatalf("first write: %q, resent %v; want the hash, not resent", b, a.script.resent())
	}
	_, _ = m.MarshalBinary()
	if !a.script.resent() {
		t.Fatal("a second write is not reported as resent")
	}
	a.eval(c, true, false) // the EVAL fallback starts a new count
	if b, _ := m.MarshalBinary(); string(b) != c.Script.Source() || a.script.resent() {
		t.Fatalf("EVAL's first write: %q, resent %v; want the source, not resent", b, a.script.resent())
	}
}
