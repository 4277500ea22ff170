package driverkit

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/dlock-go/dlock/driver"
)

func TestNormalize(t *testing.T) {
	replyErr := errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")
	tests := []struct {
		name string
		in   any
		want any
	}{
		{"nil", nil, nil},
		{"integer", int64(-7), int64(-7)},
		{"string", "x", "x"},
		{"array with a nil hole", []any{int64(1), nil, "a"}, []any{int64(1), nil, "a"}},
		{"nested array", []any{[]any{true, 1.5}}, []any{[]any{int64(1), "1.5"}}},
		{"true", true, int64(1)},
		{"false", false, int64(0)},
		{"double", 0.25, "0.25"},
		{"map in key order", map[string]any{"b": int64(2), "a": "x"}, []any{"a", "x", "b", int64(2)}},
		{"error inside an array", []any{replyErr}, []any{&driver.ReplyError{Msg: replyErr.Error(), Err: replyErr}}},
	}
	for _, tc := range tests {
		if got := Normalize(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Normalize(%#v) = %#v, want %#v", tc.name, tc.in, got, tc.want)
		}
	}
}

func TestHashTag(t *testing.T) {
	tests := []struct{ key, want string }{
		{"dlock:{orders:1}:q", "orders:1"},
		{"{a}{b}", "a"},
		{"plain", "plain"},
		{"empty{}tag", "empty{}tag"}, // an empty tag does not count: the whole key hashes
		{"open{only", "open{only"},
		{"x}{y}", "y"},
	}
	for _, tc := range tests {
		if got := hashTag(tc.key); got != tc.want {
			t.Errorf("hashTag(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}

// TestGroups: calls with WAIT go through Lib.Dedicated, one group per hash
// tag on a Cluster (or all through Lib.Replicated), or with the others when
// the library has neither; keyless calls on a Cluster get a pipeline of
// their own.
func TestGroups(t *testing.T) {
	call := func(replicas int, keys ...string) *driver.Call {
		return &driver.Call{Keys: keys, Replicas: replicas}
	}
	plainA, noKeys, repA1, repA2, repB := call(0, "{a}"), call(0), call(1, "{a}:1"), call(1, "{a}:2"), call(1, "{b}")
	dedicatedFn := func(func(DoMultiFunc[int])) {}
	tests := []struct {
		name string
		lib  Lib[int]
		want map[*driver.Call]group
	}{
		{"standalone, pipelines on one connection", Lib[int]{}, map[*driver.Call]group{
			plainA: {kind: pipelined}, noKeys: {kind: pipelined}, repA1: {kind: pipelined}, repB: {kind: pipelined}}},
		{"standalone, dedicated", Lib[int]{Dedicated: dedicatedFn}, map[*driver.Call]group{
			plainA: {kind: pipelined}, noKeys: {kind: pipelined}, repA1: {kind: dedicated}, repB: {kind: dedicated}}},
		{"cluster, dedicated", Lib[int]{Cluster: true, Dedicated: dedicatedFn}, map[*driver.Call]group{
			plainA: {kind: pipelined}, noKeys: {kind: keyless},
			repA1: {kind: dedicated, tag: "a"}, repA2: {kind: dedicated, tag: "a"}, repB: {kind: dedicated, tag: "b"}}},
		{"cluster, replicated", Lib[int]{Cluster: true, Replicated: func(context.Context, []*driver.Call) {}}, map[*driver.Call]group{
			plainA: {kind: pipelined}, repA1: {kind: replicated}, repB: {kind: replicated}}},
	}
	for _, tc := range tests {
		d := &Driver[int]{lib: tc.lib}
		for c, want := range tc.want {
			if got := d.groupOf(c); got != want {
				t.Errorf("%s: group of a call with keys %q and %d replicas = %+v, want %+v", tc.name, c.Keys, c.Replicas, got, want)
			}
		}
	}
}

func TestParseScan(t *testing.T) {
	next, keys, err := parseScan([]any{"17", []any{"a", "b"}})
	if err != nil || next != 17 || !reflect.DeepEqual(keys, []string{"a", "b"}) {
		t.Errorf("parseScan = %d, %q, %v; want 17, [a b], nil", next, keys, err)
	}
	next, keys, err = parseScan([]any{"0", []any{}})
	if err != nil || next != 0 || len(keys) != 0 {
		t.Errorf("parseScan of the last, empty page = %d, %q, %v; want 0, [], nil", next, keys, err)
	}
	for _, bad := range []any{
		nil,
		"0",
		[]any{"0"},
		[]any{int64(0), []any{}},
		[]any{"x", []any{}},
		[]any{"0", "a"},
		[]any{"0", []any{int64(1)}},
	} {
		if _, _, err := parseScan(bad); err == nil {
			t.Errorf("parseScan(%#v) returned no error", bad)
		}
	}
}
