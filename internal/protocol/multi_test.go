package protocol

import (
	"context"
	"reflect"
	"testing"
	"time"
)

func TestMultiAcquireReply(t *testing.T) {
	tests := []struct {
		name  string
		reply any
		want  MultiTake
		fence []int64
		bad   bool
	}{
		{"taken", []any{int64(7), int64(9)}, MultiTake{}, []int64{7, 9}, false},
		{"busy", []any{"busy", int64(2), int64(500)}, MultiTake{Busy: 2, HolderTTL: 500 * time.Millisecond}, nil, false},
		{"waiters first", []any{"busy", int64(1), int64(0)}, MultiTake{Busy: 1}, nil, false},
		{"busy past n", []any{"busy", int64(3), int64(500)}, MultiTake{}, nil, true},
		{"busy, no ttl", []any{"busy", int64(1)}, MultiTake{}, nil, true},
		{"too few tokens", []any{int64(7)}, MultiTake{}, nil, true},
		{"more than the tokens", []any{int64(7), int64(8), int64(9)}, MultiTake{}, []int64{7, 8}, false},
		{"not ints", []any{int64(7), "x"}, MultiTake{}, nil, true},
		{"bare", int64(7), MultiTake{}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &replyDriver{reply: tt.reply}
			fences := make([]int64, 2)
			got, err := MultiAcquire(context.Background(), d, make([][4]string, 2), "me", time.Second, time.Hour, Ack{}, fences)
			if tt.bad != (err != nil) || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("MultiAcquire answered %#v: %+v, %v; want %+v (error %v)", tt.reply, got, err, tt.want, tt.bad)
			}
			if tt.fence != nil && !reflect.DeepEqual(fences, tt.fence) {
				t.Fatalf("MultiAcquire answered %#v: tokens %v; want %v", tt.reply, fences, tt.fence)
			}
		})
	}
}

func TestMultiReleaseReply(t *testing.T) {
	tests := []struct {
		name  string
		reply any
		left  []int
		bad   bool
	}{
		{"all released", int64(1), nil, false},
		{"some left", []any{int64(1), int64(0), int64(0)}, []int{1, 2}, false},
		{"none released", []any{int64(0), int64(0), int64(0)}, []int{0, 1, 2}, false},
		{"bare zero", int64(0), nil, true},
		{"short", []any{int64(1), int64(0)}, nil, true},
		{"bad code", []any{int64(1), int64(2), int64(0)}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &replyDriver{reply: tt.reply}
			left, _, err := MultiRelease(context.Background(), d, make([]string, 6), "me")
			if tt.bad != (err != nil) || !reflect.DeepEqual(left, tt.left) {
				t.Fatalf("MultiRelease answered %#v: %v, %v; want %v (error %v)", tt.reply, left, err, tt.left, tt.bad)
			}
		})
	}
}

func TestMultiKeysByKind(t *testing.T) {
	locks := [][4]string{{"a", "a:f", "a:q", "a:w"}, {"b", "b:f", "b:q", "b:w"}}
	want := []string{"a", "b", "a:f", "b:f", "a:q", "b:q", "a:w", "b:w"}
	for _, dst := range [][]string{nil, make([]string, 0, 8)} {
		if got := multiKeys(dst, locks); !reflect.DeepEqual(got, want) {
			t.Fatalf("multiKeys(cap %d) = %q; want %q", cap(dst), got, want)
		}
	}
}
