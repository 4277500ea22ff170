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

// checkCase is a history built by hand, a checker, and how many
// violations the checker must find in it.
type checkCase struct {
	name  string
	check func(History) []Violation
	h     History
	want  int
}

// runChecks runs each case's checker on its history.
func runChecks(t *testing.T, cases []checkCase) {
	t.Helper()
	for _, c := range cases {
		if got := c.check(c.h); len(got) != c.want {
			t.Errorf("%s: %d violations, want %d: %v", c.name, len(got), c.want, got)
		}
	}
}

// The checkers that take settings, with them given.

func overlaps(capacity int, slack int64) func(History) []Violation {
	return func(h History) []Violation { return Overlaps(h, capacity, slack) }
}

func errorsContaining(text string) func(History) []Violation {
	return func(h History) []Violation { return ErrorsContaining(h, text) }
}

// TestOverlaps: holds of one lock, by its capacity, and the slack a holder's
// belief may lag by.
func TestOverlaps(t *testing.T) {
	runChecks(t, []checkCase{
		{"sequential holds", overlaps(1, 0), History{
			acq("a", "L", 0, 1, 1), held("a", 5), rel("a", 6, 7, true),
			acq("b", "L", 2, 7, 2), held("b", 9), rel("b", 9, 10, true),
		}, 0},
		{"touching holds do not overlap", overlaps(1, 0), History{
			acq("a", "L", 0, 1, 1), held("a", 5),
			acq("b", "L", 2, 5, 2), held("b", 9),
		}, 0},
		{"a belief after the successor's grant", overlaps(1, 0), History{
			acq("a", "L", 0, 1, 1), held("a", 8), // a still believed at 8
			acq("b", "L", 2, 7, 2), held("b", 9),
		}, 1},
		{"a grant inside another's hold, no Held", overlaps(1, 0), History{
			acq("a", "L", 0, 1, 1), held("a", 10),
			acq("b", "L", 2, 5, 2),
		}, 1},
		{"a hold lost as it was granted ends there", overlaps(1, 0), History{
			acq("a", "L", 0, 1, 1), // no Held: lost at once
			acq("b", "L", 2, 5, 2), held("b", 9),
			acq("c", "L", 3, 9, 3), held("c", 12),
		}, 0},
		{"an overlap within the slack", overlaps(1, ms(2)), History{
			acq("a", "L", 0, 1, 1), held("a", 8),
			acq("b", "L", 2, 7, 2), held("b", 9),
		}, 0},
		{"an overlap beyond the slack", overlaps(1, ms(2)), History{
			acq("a", "L", 0, 1, 1), held("a", 10),
			acq("b", "L", 2, 7, 2), held("b", 12),
		}, 1},
		{"different locks never overlap", overlaps(1, 0), History{
			acq("a", "L", 0, 1, 1), held("a", 10),
			acq("b", "M", 2, 5, 2), held("b", 10),
		}, 0},
		{"capacity two, three holders", overlaps(2, 0), History{
			acq("a", "S", 0, 1, 1), held("a", 10),
			acq("b", "S", 0, 2, 2), held("b", 10),
			acq("c", "S", 0, 3, 3), held("c", 10),
		}, 1},
		{"capacity two, two holders", overlaps(2, 0), History{
			acq("a", "S", 0, 1, 1), held("a", 10),
			acq("b", "S", 0, 2, 2), held("b", 10),
			acq("c", "S", 0, 11, 3), held("c", 12),
		}, 0},
	})
}

// TestReadWriteOverlaps: the holds of a read-write lock: readers share it, a
// writer excludes.
func TestReadWriteOverlaps(t *testing.T) {
	runChecks(t, []checkCase{
		{"readers together", overlaps(1, 0), History{
			rd("a", "L", 0, 1, 1), held("a", 10),
			rd("b", "L", 0, 2, 2), held("b", 10),
			rd("c", "L", 0, 3, 3), held("c", 10),
		}, 0},
		{"a writer after the readers", overlaps(1, 0), History{
			rd("a", "L", 0, 1, 1), held("a", 5),
			rd("b", "L", 0, 2, 2), held("b", 6),
			wr("c", "L", 0, 6, 3), held("c", 9),
			rd("d", "L", 0, 9, 4), held("d", 12),
		}, 0},
		{"a writer among readers", overlaps(1, 0), History{
			rd("a", "L", 0, 1, 1), held("a", 10),
			wr("b", "L", 0, 5, 2), held("b", 12),
		}, 1},
		{"a reader inside a writer's hold", overlaps(1, 0), History{
			wr("a", "L", 0, 1, 1), held("a", 10),
			rd("b", "L", 0, 5, 2), held("b", 12),
		}, 1},
		{"two writers", overlaps(1, 0), History{
			wr("a", "L", 0, 1, 1), held("a", 10),
			wr("b", "L", 0, 5, 2), held("b", 12),
		}, 1},
		{"a reader and a hold without a mode", overlaps(1, 0), History{
			rd("a", "L", 0, 1, 1), held("a", 10),
			acq("b", "L", 0, 5, 2), held("b", 12),
		}, 1},
		{"a writer's belief within the slack", overlaps(1, ms(2)), History{
			wr("a", "L", 0, 1, 1), held("a", 6),
			rd("b", "L", 0, 5, 2), held("b", 12),
		}, 0},
	})
}

// TestErrorsContaining: errors that must never reach callers.
func TestErrorsContaining(t *testing.T) {
	runChecks(t, []checkCase{
		{"NOSCRIPT leaked", errorsContaining("NOSCRIPT"), History{
			{Kind: Acquire, Err: "error: NOSCRIPT No matching script"}, {Kind: Release, Err: "not-held: x"},
		}, 1},
	})
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
