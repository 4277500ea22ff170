package chaos

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Helpers that build histories by hand. Times are in milliseconds.

func ms(v int64) int64 { return v * int64(time.Millisecond) }

func acq(hold, lock string, t0, t int64, token int64) Event {
	return Event{Kind: Acquire, T0: ms(t0), T: ms(t), Lock: lock, Hold: hold, Owner: "owner-" + hold, Token: token, OK: true}
}

// rd and wr are acquisitions of a read-write lock, for reading and for
// writing.
func rd(hold, lock string, t0, t int64, token int64) Event {
	e := acq(hold, lock, t0, t, token)
	e.Note = ModeRead
	return e
}

func wr(hold, lock string, t0, t int64, token int64) Event {
	e := acq(hold, lock, t0, t, token)
	e.Note = ModeWrite
	return e
}

func reenter(hold, note string, t0, t int64, token int64, ok bool) Event {
	e := Event{Kind: Reenter, T0: ms(t0), T: ms(t), Lock: "L", Hold: hold, Note: note, Token: token, OK: ok}
	if !ok {
		e.Err = "lost: dlock: lock lost"
	}
	return e
}

func held(hold string, t int64) Event { return Event{Kind: Held, T: ms(t), Hold: hold} }

func rel(hold string, t0, t int64, ok bool) Event {
	e := Event{Kind: Release, T0: ms(t0), T: ms(t), Hold: hold, OK: ok}
	if !ok {
		e.Err = "not-held: dlock: not held"
	}
	return e
}

func write(hold, key string, t0, t int64, token int64, ok bool) Event {
	return Event{Kind: Write, T0: ms(t0), T: ms(t), Hold: hold, Key: key, Token: token, OK: ok, Note: "set"}
}

func TestCheckers(t *testing.T) {
	cases := []struct {
		name  string
		check func(History) []Violation
		h     History
		want  int // violations
	}{
		// Overlaps.
		{"sequential holds", func(h History) []Violation { return Overlaps(h, 1, 0) }, History{
			acq("a", "L", 0, 1, 1), held("a", 5), rel("a", 6, 7, true),
			acq("b", "L", 2, 7, 2), held("b", 9), rel("b", 9, 10, true),
		}, 0},
		{"touching holds do not overlap", func(h History) []Violation { return Overlaps(h, 1, 0) }, History{
			acq("a", "L", 0, 1, 1), held("a", 5),
			acq("b", "L", 2, 5, 2), held("b", 9),
		}, 0},
		{"a belief after the successor's grant", func(h History) []Violation { return Overlaps(h, 1, 0) }, History{
			acq("a", "L", 0, 1, 1), held("a", 8), // a still believed at 8
			acq("b", "L", 2, 7, 2), held("b", 9),
		}, 1},
		{"a grant inside another's hold, no Held", func(h History) []Violation { return Overlaps(h, 1, 0) }, History{
			acq("a", "L", 0, 1, 1), held("a", 10),
			acq("b", "L", 2, 5, 2),
		}, 1},
		{"a hold lost as it was granted ends there", func(h History) []Violation { return Overlaps(h, 1, 0) }, History{
			acq("a", "L", 0, 1, 1), // no Held: lost at once
			acq("b", "L", 2, 5, 2), held("b", 9),
			acq("c", "L", 3, 9, 3), held("c", 12),
		}, 0},
		{"an overlap within the slack", func(h History) []Violation { return Overlaps(h, 1, ms(2)) }, History{
			acq("a", "L", 0, 1, 1), held("a", 8),
			acq("b", "L", 2, 7, 2), held("b", 9),
		}, 0},
		{"an overlap beyond the slack", func(h History) []Violation { return Overlaps(h, 1, ms(2)) }, History{
			acq("a", "L", 0, 1, 1), held("a", 10),
			acq("b", "L", 2, 7, 2), held("b", 12),
		}, 1},
		{"different locks never overlap", func(h History) []Violation { return Overlaps(h, 1, 0) }, History{
			acq("a", "L", 0, 1, 1), held("a", 10),
			acq("b", "M", 2, 5, 2), held("b", 10),
		}, 0},
		{"capacity two, three holders", func(h History) []Violation { return Overlaps(h, 2, 0) }, History{
			acq("a", "S", 0, 1, 1), held("a", 10),
			acq("b", "S", 0, 2, 2), held("b", 10),
			acq("c", "S", 0, 3, 3), held("c", 10),
		}, 1},
		{"capacity two, two holders", func(h History) []Violation { return Overlaps(h, 2, 0) }, History{
			acq("a", "S", 0, 1, 1), held("a", 10),
			acq("b", "S", 0, 2, 2), held("b", 10),
			acq("c", "S", 0, 11, 3), held("c", 12),
		}, 0},

		// Overlaps of a read-write lock.
		{"readers together", func(h History) []Violation { return Overlaps(h, 1, 0) }, History{
			rd("a", "L", 0, 1, 1), held("a", 10),
			rd("b", "L", 0, 2, 2), held("b", 10),
			rd("c", "L", 0, 3, 3), held("c", 10),
		}, 0},
		{"a writer after the readers", func(h History) []Violation { return Overlaps(h, 1, 0) }, History{
			rd("a", "L", 0, 1, 1), held("a", 5),
			rd("b", "L", 0, 2, 2), held("b", 6),
			wr("c", "L", 0, 6, 3), held("c", 9),
			rd("d", "L", 0, 9, 4), held("d", 12),
		}, 0},
		{"a writer among readers", func(h History) []Violation { return Overlaps(h, 1, 0) }, History{
			rd("a", "L", 0, 1, 1), held("a", 10),
			wr("b", "L", 0, 5, 2), held("b", 12),
		}, 1},
		{"a reader inside a writer's hold", func(h History) []Violation { return Overlaps(h, 1, 0) }, History{
			wr("a", "L", 0, 1, 1), held("a", 10),
			rd("b", "L", 0, 5, 2), held("b", 12),
		}, 1},
		{"two writers", func(h History) []Violation { return Overlaps(h, 1, 0) }, History{
			wr("a", "L", 0, 1, 1), held("a", 10),
			wr("b", "L", 0, 5, 2), held("b", 12),
		}, 1},
		{"a reader and a hold without a mode", func(h History) []Violation { return Overlaps(h, 1, 0) }, History{
			rd("a", "L", 0, 1, 1), held("a", 10),
			acq("b", "L", 0, 5, 2), held("b", 12),
		}, 1},
		{"a writer's belief within the slack", func(h History) []Violation { return Overlaps(h, 1, ms(2)) }, History{
			wr("a", "L", 0, 1, 1), held("a", 6),
			rd("b", "L", 0, 5, 2), held("b", 12),
		}, 0},

		// Lost updates.
		{"increments in order", LostUpdates, History{
			{Kind: RMW, Key: "k", Val: 0, OK: true, Hold: "a"}, {Kind: RMW, Key: "k", Val: 1, OK: true, Hold: "b"},
			{Kind: Final, Key: "k", Val: 2},
		}, 0},
		{"two increments read the same value", LostUpdates, History{
			{Kind: RMW, Key: "k", Val: 0, OK: true, Hold: "a"}, {Kind: RMW, Key: "k", Val: 0, OK: true, Hold: "b"},
		}, 1},
		{"final value short", LostUpdates, History{
			{Kind: RMW, Key: "k", Val: 0, OK: true, Hold: "a"}, {Kind: RMW, Key: "k", Val: 1, OK: true, Hold: "b"},
			{Kind: Final, Key: "k", Val: 1},
		}, 1},
		{"a failed increment makes the final value unknowable", LostUpdates, History{
			{Kind: RMW, Key: "k", Val: 0, OK: true, Hold: "a"}, {Kind: RMW, Key: "k", Val: 1, Hold: "b", Err: "timeout"},
			{Kind: Final, Key: "k", Val: 2},
		}, 0},

		// Stale fenced operations.
		{"the store refuses the stale holder", StaleAccepted, History{
			acq("a", "L", 0, 1, 10), acq("b", "L", 5, 6, 11),
			write("b", "r", 7, 8, 11, true), write("a", "r", 9, 10, 10, false),
		}, 0},
		{"the store accepts the stale holder", StaleAccepted, History{
			acq("a", "L", 0, 1, 10), acq("b", "L", 5, 6, 11),
			write("b", "r", 7, 8, 11, true), write("a", "r", 9, 10, 10, true),
		}, 1},
		{"a stale write that overlapped the new one proves nothing", StaleAccepted, History{
			acq("a", "L", 0, 1, 10), acq("b", "L", 5, 6, 11),
			write("b", "r", 7, 9, 11, true), write("a", "r", 8, 10, 10, true),
		}, 0},
		{"regressed tokens let a stale write in", StaleAccepted, History{
			acq("a", "L", 0, 1, 10), acq("b", "L", 5, 6, 3), // b's token went backwards
			write("b", "r", 7, 8, 3, true), write("a", "r", 9, 10, 10, true),
		}, 1},
		{"concurrent acquisitions are not ordered", StaleAccepted, History{
			acq("a", "L", 0, 6, 10), acq("b", "L", 5, 7, 11),
			write("b", "r", 7, 8, 11, true), write("a", "r", 9, 10, 10, true),
		}, 0},

		// Token order.
		{"tokens increase", TokenOrder, History{acq("a", "L", 0, 1, 5), acq("b", "L", 2, 3, 6)}, 0},
		{"a token goes back", TokenOrder, History{acq("a", "L", 0, 1, 5), acq("b", "L", 2, 3, 4)}, 1},
		{"a token repeats", TokenOrder, History{acq("a", "L", 0, 1, 5), acq("b", "L", 2, 3, 5)}, 1},
		{"concurrent acquisitions may come in any order", TokenOrder, History{acq("a", "L", 0, 3, 5), acq("b", "L", 2, 4, 4)}, 0},
		{"Redlock has no tokens", TokenOrder, History{acq("a", "L", 0, 1, 0), acq("b", "L", 2, 3, 0)}, 0},

		// Foreign releases and renewals.
		{"a late Unlock refused", ForeignOps, History{
			acq("a", "L", 0, 1, 1), acq("b", "L", 5, 6, 2), rel("a", 7, 8, false), rel("b", 9, 10, true),
		}, 0},
		{"a late Unlock that succeeded", ForeignOps, History{
			acq("a", "L", 0, 1, 1), acq("b", "L", 5, 6, 2), rel("a", 7, 8, true), rel("b", 9, 10, true),
		}, 1},
		{"a late Unlock that deleted the successor's key", ForeignOps, History{
			acq("a", "L", 0, 1, 1), acq("b", "L", 5, 6, 2), rel("a", 7, 8, true), rel("b", 9, 10, false),
		}, 1},
		{"an Unlock that handed the lock over", ForeignOps, History{
			acq("a", "L", 0, 1, 1), acq("b", "L", 0, 6, 2), rel("a", 5, 6, true),
		}, 0},
		{"an Unlock concurrent with the next grant", ForeignOps, History{
			acq("a", "L", 0, 1, 1), acq("b", "L", 5, 7, 2), rel("a", 6, 8, true),
		}, 0},
		{"a renewal of the successor's key", ForeignOps, History{
			acq("a", "L", 0, 1, 1), acq("b", "L", 5, 6, 2),
			{Kind: Cmd, Note: "renew", T0: ms(7), T: ms(8), Owner: "owner-a", OK: true},
			rel("b", 9, 10, true),
		}, 1},
		{"a refused renewal", ForeignOps, History{
			acq("a", "L", 0, 1, 1), acq("b", "L", 5, 6, 2),
			{Kind: Cmd, Note: "renew", T0: ms(7), T: ms(8), Owner: "owner-a"},
			rel("b", 9, 10, true),
		}, 0},
		{"a late Unlock of a reader after another reader's grant", ForeignOps, History{
			rd("a", "L", 0, 1, 1), rd("b", "L", 5, 6, 2), rel("a", 7, 8, true), rel("b", 9, 10, true),
		}, 0},
		{"a late Unlock of a reader after a writer's grant", ForeignOps, History{
			rd("a", "L", 0, 1, 1), wr("b", "L", 5, 6, 2), rel("a", 7, 8, true), rel("b", 9, 10, true),
		}, 1},
		{"a late Unlock of a writer after a reader's grant", ForeignOps, History{
			wr("a", "L", 0, 1, 1), rd("b", "L", 5, 6, 2), rel("a", 7, 8, true), rel("b", 9, 10, true),
		}, 1},

		// Nested holds of a reentrant lock.
		{"nested holds that succeed", Reentries, History{
			acq("a", "L", 0, 1, 7), reenter("a", "lock", 2, 3, 7, true), reenter("a", "lock", 4, 5, 7, true),
			reenter("a", "unlock", 6, 7, 0, true), reenter("a", "unlock", 8, 9, 0, true), rel("a", 10, 11, true),
		}, 0},
		{"a nested lock refused", Reentries, History{
			acq("a", "L", 0, 1, 7), reenter("a", "lock", 2, 3, 0, false), rel("a", 10, 11, true),
		}, 1},
		{"a nested unlock refused", Reentries, History{
			acq("a", "L", 0, 1, 7), reenter("a", "lock", 2, 3, 7, true), reenter("a", "unlock", 6, 7, 0, false),
		}, 1},
		{"a nested lock with another token", Reentries, History{
			acq("a", "L", 0, 1, 7), reenter("a", "lock", 2, 3, 8, true), reenter("a", "unlock", 6, 7, 0, true),
		}, 1},

		// Re-created and unreported losses.
		{"a wiped lock stays gone", func(h History) []Violation { return append(Recreated(h), Unreported(h)...) }, History{
			acq("a", "L", 0, 1, 1), {Kind: Fault, Note: "wipe", T: ms(5)},
			{Kind: Probe, T0: ms(6), T: ms(7), Key: "k", Val: -2},
			{Kind: Lost, T: ms(8), Hold: "a"},
		}, 0},
		{"a wiped lock comes back", Recreated, History{
			acq("a", "L", 0, 1, 1), {Kind: Fault, Note: "wipe", T: ms(5)},
			{Kind: Probe, T0: ms(6), T: ms(7), Key: "k", Owner: "owner-a", Val: 900},
		}, 1},
		{"a grant after the wipe is new", Recreated, History{
			acq("a", "L", 4, 6, 1), {Kind: Fault, Note: "wipe", T: ms(5)},
			{Kind: Probe, T0: ms(7), T: ms(8), Key: "k", Owner: "owner-a", Val: 900},
		}, 0},
		{"a wiped lock never reported", Unreported, History{
			acq("a", "L", 0, 1, 1), {Kind: Fault, Note: "wipe", T: ms(5)},
		}, 1},
		{"a wiped lock whose Unlock failed otherwise", Unreported, History{
			acq("a", "L", 0, 1, 1), {Kind: Fault, Note: "wipe", T: ms(5)},
			{Kind: Release, T0: ms(6), T: ms(7), Hold: "a", Err: "error: connection refused"},
		}, 1},
		{"a lock released while the wipe began", Unreported, History{
			acq("a", "L", 0, 1, 1), {Kind: Fault, Note: "wipe", T0: ms(4), T: ms(6)}, rel("a", 5, 5, true),
		}, 0},
		{"a probe during the wipe proves nothing", Recreated, History{
			acq("a", "L", 0, 1, 1), {Kind: Fault, Note: "wipe", T0: ms(4), T: ms(6)},
			{Kind: Probe, T0: ms(5), T: ms(5), Key: "k", Owner: "owner-a", Val: 900},
		}, 0},
		{"a wiped lock reported by Unlock", Unreported, History{
			acq("a", "L", 0, 1, 1), {Kind: Fault, Note: "wipe", T: ms(5)}, rel("a", 9, 10, false),
		}, 0},
		{"a lock released before the wipe", Unreported, History{
			acq("a", "L", 0, 1, 1), rel("a", 2, 3, true), {Kind: Fault, Note: "wipe", T: ms(5)},
		}, 0},

		// Errors that must never reach callers.
		{"NOSCRIPT leaked", func(h History) []Violation { return ErrorsContaining(h, "NOSCRIPT") }, History{
			{Kind: Acquire, Err: "error: NOSCRIPT No matching script"}, {Kind: Release, Err: "not-held: x"},
		}, 1},

		// Latches.
		{"a latch released after its last count-down", func(h History) []Violation { return EarlyWaits(h, 2) }, History{
			{Kind: CountDown, Lock: "l", T0: ms(1), T: ms(2), OK: true}, {Kind: CountDown, Lock: "l", T0: ms(3), T: ms(4), OK: true},
			{Kind: Await, Lock: "l", Note: "returned", T0: ms(0), T: ms(4), OK: true},
		}, 0},
		{"a latch released before its last count-down", func(h History) []Violation { return EarlyWaits(h, 2) }, History{
			{Kind: CountDown, Lock: "l", T0: ms(1), T: ms(2), OK: true},
			{Kind: Await, Lock: "l", Note: "returned", T0: ms(0), T: ms(3), OK: true},
			{Kind: CountDown, Lock: "l", T0: ms(5), T: ms(6), OK: true},
		}, 1},
		{"a wait that failed proves nothing", func(h History) []Violation { return EarlyWaits(h, 2) }, History{
			{Kind: Await, Lock: "l", Note: "returned", T0: ms(0), T: ms(3)},
		}, 0},

		// Keys without TTL.
		{"keys with TTLs", NoTTL, History{{Kind: Probe, Key: "k", Val: 300}, {Kind: Probe, Key: "gone", Val: -2}}, 0},
		{"a key without TTL", NoTTL, History{{Kind: Probe, Key: "k", Val: -1}}, 1},

		// Renewals after Unlock.
		{"renewal before the release", RenewAfterRelease, History{
			{Kind: Cmd, Note: "renew", T0: ms(1), T: ms(3), Owner: "o"},
			{Kind: Cmd, Note: "release", T0: ms(3), T: ms(4), Owner: "o"},
		}, 0},
		{"renewal after the release", RenewAfterRelease, History{
			{Kind: Cmd, Note: "release", T0: ms(3), T: ms(4), Owner: "o"},
			{Kind: Cmd, Note: "renew", T0: ms(5), T: ms(6), Owner: "o"},
		}, 1},

		// Late losses.
		{"a loss on time", func(h History) []Violation { return LateLosses(h, ms(50)) }, History{
			{Kind: Lost, T: ms(140), Deadline: ms(100), Hold: "a"},
		}, 0},
		{"a late loss", func(h History) []Violation { return LateLosses(h, ms(50)) }, History{
			{Kind: Lost, T: ms(151), Deadline: ms(100), Hold: "a"},
		}, 1},
	}
	for _, c := range cases {
		got := c.check(c.h)
		if len(got) != c.want {
			t.Errorf("%s: %d violations, want %d: %v", c.name, len(got), c.want, got)
		}
	}
}

func TestAllCombinesCheckers(t *testing.T) {
	h := History{
		acq("a", "L", 0, 1, 5), held("a", 8),
		acq("b", "L", 2, 7, 4), held("b", 9), // overlaps a, and its token went back
		{Kind: Probe, Key: "k", Val: -1},
	}
	got := ByCheck(All(h, 1, 0))
	want := map[string]int{CheckOverlap: 1, CheckNoTTL: 1, CheckTokenOrder: 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("checks flagged: %v, want %v", got, want)
	}
}

func TestMostHeld(t *testing.T) {
	h := History{
		rd("a", "L", 0, 1, 1), held("a", 10),
		rd("b", "L", 0, 2, 2), held("b", 4), // ends before c begins
		rd("c", "L", 0, 5, 3), held("c", 10),
		wr("d", "L", 0, 11, 4), held("d", 12),
		rd("e", "M", 0, 1, 1), held("e", 10),
		rd("f", "M", 0, 2, 2), held("f", 10),
		rd("g", "M", 0, 3, 3), held("g", 10),
	}
	reads := func(e Event) bool { return e.Note == ModeRead && e.Lock == "L" }
	if got := MostHeld(h, reads); got != 2 {
		t.Errorf("readers of L at once: %d, want 2", got)
	}
	if got := MostHeld(h, nil); got != 3 {
		t.Errorf("holders at once: %d, want 3", got)
	}
	writes := func(e Event) bool { return e.Note == ModeWrite }
	if got := MostHeld(h, writes); got != 1 {
		t.Errorf("writers at once: %d, want 1", got)
	}
	if got := MostHeld(nil, nil); got != 0 {
		t.Errorf("empty history: %d, want 0", got)
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	in := History{acq("a", "L", 1, 2, 3), held("a", 4), {Kind: Fault, Note: "pause", T: 9, Proc: "w1"}}
	buf.WriteString("some other output\n")
	for _, e := range in {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	var out History
	var other []string
	if err := Decode(&buf, func(e Event) { out = append(out, e) }, func(l string) { other = append(other, l) }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out) != fmt.Sprint(in) {
		t.Errorf("round trip: got %v, want %v", out, in)
	}
	if len(other) != 1 || other[0] != "some other output" {
		t.Errorf("other lines: %q", other)
	}
}

func TestClockIsMonotonicAndNanoseconds(t *testing.T) {
	a := Now()
	time.Sleep(2 * time.Millisecond)
	b := Now()
	if d := time.Duration(b - a); d < 2*time.Millisecond || d > time.Second {
		t.Errorf("2ms sleep measured as %v", d)
	}
}

func TestDurations(t *testing.T) {
	var d Durations
	for i := 1; i <= 100; i++ {
		d.Add(time.Duration(i) * time.Millisecond)
	}
	if d.Quantile(0.5) != 50*time.Millisecond || d.Quantile(0.99) != 99*time.Millisecond || d.Max() != 100*time.Millisecond {
		t.Errorf("quantiles: %v %v %v", d.Quantile(0.5), d.Quantile(0.99), d.Max())
	}
	if (Durations{}).Summary() != "no samples" {
		t.Error("empty summary")
	}
}

func TestSplice(t *testing.T) {
	doc := "# T\n<!-- chaos:begin a -->\nold a\n<!-- chaos:end a -->\ntext\n<!-- chaos:begin b -->\nold b\n<!-- chaos:end b -->\n"
	out, replaced, missing := Splice(doc, map[string]string{"a": "new a\n", "c": "x"})
	want := "# T\n<!-- chaos:begin a -->\nnew a\n<!-- chaos:end a -->\ntext\n<!-- chaos:begin b -->\nold b\n<!-- chaos:end b -->\n"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	if strings.Join(replaced, ",") != "a" || strings.Join(missing, ",") != "c" {
		t.Errorf("replaced %v, missing %v", replaced, missing)
	}
}

func TestReplyBytesRoundTrip(t *testing.T) {
	for _, v := range []any{nil, int64(-5), int64(1 << 60), "owner", []any{int64(1), "x", nil, []any{int64(2)}}} {
		if got := Reply(ReplyBytes(v)); fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", v) {
			t.Errorf("Reply(ReplyBytes(%#v)) = %#v", v, got)
		}
	}
}
