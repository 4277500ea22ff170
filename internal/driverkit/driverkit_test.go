package driverkit

import (
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

func TestBatches(t *testing.T) {
	call := func(replicas int, keys ...string) *driver.Call {
		return &driver.Call{Keys: keys, Replicas: replicas}
	}
	plainA, plainB, keyless := call(0, "{a}"), call(0, "{b}"), call(0)
	repA1, repA2, repB := call(1, "{a}:1"), call(1, "{a}:2"), call(1, "{b}")
	calls := []*driver.Call{plainA, repA1, keyless, repB, plainB, repA2}

	standalone := (&Driver[int]{lib: Lib[int]{}}).batches(calls)
	want := []batch{
		{calls: []*driver.Call{plainA, keyless, plainB}},
		{calls: []*driver.Call{repA1, repB, repA2}, dedicated: true},
	}
	if !reflect.DeepEqual(standalone, want) {
		t.Errorf("standalone batches = %v, want %v", standalone, want)
	}

	cluster := (&Driver[int]{lib: Lib[int]{Cluster: true}}).batches(calls)
	want = []batch{
		{calls: []*driver.Call{plainA, plainB}},
		{calls: []*driver.Call{keyless}},
		{calls: []*driver.Call{repA1, repA2}, dedicated: true},
		{calls: []*driver.Call{repB}, dedicated: true},
	}
	if !reflect.DeepEqual(cluster, want) {
		t.Errorf("cluster batches = %v, want %v", cluster, want)
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
