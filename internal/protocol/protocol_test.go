package protocol

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
)

// replyDriver answers every call with reply, or with err.
type replyDriver struct {
	reply any
	err   error
	calls []*driver.Call
}

func (d *replyDriver) Run(_ context.Context, calls ...*driver.Call) {
	for _, c := range calls {
		c.Reply, c.Err = d.reply, d.err
		d.calls = append(d.calls, c)
	}
}

func (d *replyDriver) PublishCommand() string                       { return "PUBLISH" }
func (d *replyDriver) Subscribe(driver.Handler) driver.Subscription { return nil }

func TestAttempt(t *testing.T) {
	const px = 30000
	tests := []struct {
		name     string
		reply    any
		withFree bool
		want     Attempt
		bad      bool
	}{
		{"fast path", int64(7), false, Attempt{Granted: true, Fence: 7, PTTL: px * time.Millisecond}, false},
		{"bare zero", int64(0), false, Attempt{}, true},
		{"granted", []any{int64(1), int64(8), int64(500)}, false, Attempt{Granted: true, Fence: 8, PTTL: 500 * time.Millisecond}, false},
		{"held", []any{int64(0), int64(200), int64(0), int64(6)}, false, Attempt{PTTL: 200 * time.Millisecond, LastFence: 6}, false},
		{"held, no fence", []any{int64(0), int64(200), int64(0)}, false, Attempt{PTTL: 200 * time.Millisecond}, false},
		{"held, free", []any{int64(0), int64(200), int64(0), int64(3), int64(9)}, true, Attempt{PTTL: 200 * time.Millisecond, Free: 3, LastFence: 9}, false},
		{"short", []any{int64(1), int64(8)}, false, Attempt{}, true},
		{"not ints", []any{int64(1), "x", int64(8)}, false, Attempt{}, true},
		{"nil", nil, false, Attempt{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Call{}
			c.Reply = tt.reply
			got, err := c.attempt(px, tt.withFree)
			if tt.bad != (err != nil) || got != tt.want {
				t.Fatalf("attempt(%#v) = %+v, %v; want %+v (error %v)", tt.reply, got, err, tt.want, tt.bad)
			}
		})
	}
}

func TestReleaseHandsOff(t *testing.T) {
	d := &replyDriver{reply: []any{int64(2), int64(11), int64(900), "next"}}
	var got []string
	r, err := MutexRelease(context.Background(), d, [4]string{"k", "f", "q", "w"}, "me", LockMode(d, false), new(string),
		func(owner string, fence int64, px time.Duration) {
			if fence != 11 || px != 900*time.Millisecond {
				t.Errorf("deliver(%q, %d, %v)", owner, fence, px)
			}
			got = append(got, owner)
		})
	if err != nil || r.Resent || len(got) != 1 || got[0] != "next" {
		t.Fatalf("MutexRelease = %+v, %v; delivered %v", r, err, got)
	}
	for _, reply := range []any{int64(0), []any{int64(2), int64(1), int64(2)}, []any{"2"}} {
		d.reply = reply
		_, err := MutexRelease(context.Background(), d, [4]string{}, "me", LockMode(d, false), new(string), nil)
		if err == nil {
			t.Errorf("MutexRelease answered %#v: no error", reply)
		}
	}
}

func TestPTTLReply(t *testing.T) {
	tests := []struct {
		reply any
		want  time.Duration
		err   error
	}{
		{int64(1500), 1500 * time.Millisecond, nil},
		{int64(-3), 0, errs.ErrNotHeld},
		{int64(-1), 0, errs.ErrKeyConflict},
		{int64(math.MaxInt64), math.MaxInt64, nil},
	}
	for _, tt := range tests {
		got, err := OwnedPTTLReply(tt.reply)
		if got != tt.want || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
			t.Errorf("OwnedPTTLReply(%v) = %v, %v; want %v, %v", tt.reply, got, err, tt.want, tt.err)
		}
	}
	if _, err := OwnedPTTLReply("x"); err == nil {
		t.Error("OwnedPTTLReply(\"x\"): no error")
	}
}

func TestRedlockAcquireReply(t *testing.T) {
	if ok, held, err := RedlockAcquireReply(int64(1)); !ok || held != (RedlockHeld{}) || err != nil {
		t.Fatalf("granted: %v %+v %v", ok, held, err)
	}
	for _, tc := range []struct {
		reply any
		want  RedlockHeld
	}{
		{[]any{int64(0), int64(250), "them", int64(1)}, RedlockHeld{TTL: 250 * time.Millisecond, Holder: "them", Next: true}},
		{[]any{int64(0), int64(250), "them", int64(0)}, RedlockHeld{TTL: 250 * time.Millisecond, Holder: "them"}},
		{[]any{int64(0), int64(250), "them"}, RedlockHeld{TTL: 250 * time.Millisecond, Holder: "them"}}, // an older script
	} {
		ok, held, err := RedlockAcquireReply(tc.reply)
		if ok || held != tc.want || err != nil {
			t.Errorf("RedlockAcquireReply(%#v) = %v %+v %v, want %+v", tc.reply, ok, held, err, tc.want)
		}
	}
	for _, reply := range []any{int64(2), []any{int64(0)}, []any{int64(3), int64(1)}, nil} {
		if _, _, err := RedlockAcquireReply(reply); err == nil {
			t.Errorf("RedlockAcquireReply(%#v): no error", reply)
		}
	}
}

func TestExtendCallsAllocateOnce(t *testing.T) {
	lock, owner := "dlock:{x}", "owner"
	n := testing.AllocsPerRun(100, func() {
		c := OwnedExtend(lock, "", owner, 3*time.Second, true)
		if len(c.Batch()) != 1 || len(c.Args) != 3 {
			t.Fatal("malformed call")
		}
	})
	if n != 1 {
		t.Fatalf("OwnedExtend: %v allocations, want 1", n)
	}
}

// The Semaphore's settings are one argument, appended without allocating
// to a buffer with room, and its acquire tells the script whether n fits
// the permits given.
func TestSemSettingsAndJoin(t *testing.T) {
	d := &replyDriver{reply: int64(9)}
	tm := &Timings{TTL: 30000, WaiterLease: 30000, ClaimWindow: 5000, FenceRetention: 3600000, LimitRetention: 604800000}
	var buf [100]byte
	var got []byte
	if n := testing.AllocsPerRun(20, func() { got = AppendSemSettings(buf[:0], d, 8, tm) }); n > 0 {
		t.Errorf("AppendSemSettings: %v allocations, want 0", n)
	}
	if want := "8 604800000 30000 5000 3600000 PUBLISH"; string(got) != want {
		t.Errorf("AppendSemSettings = %q, want %q", got, want)
	}
	// The longest settings: the most permits, timings of MaxInt64 ms, and
	// SPUBLISH, one byte longer than PUBLISH.
	huge := &Timings{LimitRetention: math.MaxInt64, WaiterLease: math.MaxInt64, ClaimWindow: math.MaxInt64, FenceRetention: math.MaxInt64}
	if n := len(AppendSemSettings(nil, d, math.MaxInt32, huge)) + 1; n >= 100 {
		t.Errorf("the longest settings take %d bytes, want under 100", n)
	}
	settings := string(got)
	for _, tc := range []struct {
		n     int
		queue bool
		want  any
	}{{1, true, "1+"}, {8, false, "0+"}, {9, true, "1-"}, {9, false, "0-"}} {
		d.calls = nil
		a, err := SemAcquire(context.Background(), d, []string{"h", "c", "l", "f", "q", "w"}, "o", tc.n, 8, tc.queue, &tm.TTL, &settings, Ack{})
		if err != nil || !a.Granted || a.Fence != 9 {
			t.Fatalf("SemAcquire(%d): %+v, %v", tc.n, a, err)
		}
		if args := d.calls[0].Args; len(args) != 5 || args[3] != tc.want || *args[4].(*string) != settings {
			t.Errorf("SemAcquire(%d of 8, queue %v) args %v, want the flag %q and the settings", tc.n, tc.queue, args, tc.want)
		}
	}
}

// TestSetArgsKeepsEveryArgument checks that a call keeps all its arguments,
// those that fit its own room and more than fit.
func TestSetArgsKeepsEveryArgument(t *testing.T) {
	for n := 0; n <= 7; n++ {
		args := make([]any, n)
		for i := range args {
			args[i] = i
		}
		c := newCall(nil, nil, "owner")
		c.setArgs(args...)
		if len(c.Args) != n {
			t.Fatalf("%d arguments: the call has %d", n, len(c.Args))
		}
		for i, a := range c.Args {
			if a != i {
				t.Fatalf("%d arguments: argument %d is %v", n, i, a)
			}
		}
	}
}
