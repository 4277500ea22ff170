package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
)

// Kind says what an Event records.
type Kind string

// The kinds of events. Each names the fields it uses; Proc and T are always
// set. An operation that takes time has T0 (invoked) and T (returned); an
// observation has only T.
const (
	// Acquire is a TryLock or Lock call: T0 invoked, T returned. OK: a
	// lease was granted, with Hold (a new id, unique in the history),
	// Owner (the value the lock key holds) and Token. Err otherwise. Note
	// is the mode of an acquisition of a read-write lock (ModeRead or
	// ModeWrite), empty for any other lock.
	Acquire Kind = "acquire"
	// Held says that Hold's holder found its lease still valid (Done not
	// closed) at some moment at or after T: T is stamped before looking.
	Held Kind = "held"
	// Lost says that Hold's holder saw its lease end (Done closed) at or
	// before T: T is stamped after seeing it. Deadline, when known, is the
	// lease's local validity deadline; Err is Lease.Err.
	Lost Kind = "lost"
	// Release is an Unlock: T0 invoked, T returned. OK: released; Err
	// "not-held" for ErrNotHeld, or another failure.
	Release Kind = "release"
	// Reenter is a nested hold of a reentrant lock, taken by Hold's holder
	// while it holds the lock: Note "lock" for the nested Lock (Token: the
	// token it returned), "unlock" for the Unlock of its lease. T0
	// invoked, T returned, OK, Err. The lock stays held by Hold until its
	// Release.
	Reenter Kind = "reenter"
	// Cmd is a script call as the holder's Redis client sent it (a go-redis
	// hook): Note "renew", "release" (the owner gives up the lock),
	// "release-hold" (a reentrant lock's owner gives up one hold and keeps
	// the lock, or tried to give one up and failed) or "acquire"; T0 sent,
	// T answered; Owner from its arguments; OK when the server said it
	// succeeded.
	Cmd Kind = "cmd"
	// Write is an operation on the fenced store (Note "get", "set" or
	// "update") on Key with Token by Hold: T0 invoked, T returned. OK: the
	// store accepted it; Err "stale" when it refused the token.
	Write Kind = "write"
	// RMW is a read-modify-write of an unfenced counter at Key by Hold:
	// Val is the value read; OK means the incremented value was written.
	RMW Kind = "rmw"
	// Final is the value of the counter at Key after the run (Val).
	Final Kind = "final"
	// Probe is an outside look at a key at T: Owner is its value, Val its
	// PTTL in milliseconds (-1: no expiry, -2: absent).
	Probe Kind = "probe"
	// CountDown is a Latch.CountDown on Lock: T0 invoked, T returned, OK.
	CountDown Kind = "countdown"
	// Await is a Latch.Wait on Lock: Note "invoked" at T when it was
	// called, Note "returned" with T0 (invoked), T (returned) and OK when
	// it returned.
	Await Kind = "await"
	// Fault is a fault injected (Note says which: "pause", "resume",
	// "kill", "restart", "wipe", "flush", "blackhole", ...), at T; Lock,
	// when set, is the one lock it targets, and Proc the process.
	Fault Kind = "fault"
)

// The modes of a read-write lock's acquisitions (an Acquire's Note).
// Readers may hold the lock together; a writer holds it alone.
const (
	ModeRead  = "read"
	ModeWrite = "write"
)

// Event is one thing a client did or saw, or a fault the test injected.
// Stamps are CLOCK_MONOTONIC nanoseconds (Now), taken where they make a
// violation certain: an invocation is stamped before the call, a completion
// after it returns, a belief (Held) before it is checked, a loss (Lost)
// after it was seen.
type Event struct {
	Kind     Kind   `json:"k"`
	T0       int64  `json:"t0,omitempty"`
	T        int64  `json:"t"`
	Proc     string `json:"p,omitempty"`
	Lock     string `json:"l,omitempty"`
	Hold     string `json:"h,omitempty"`
	Owner    string `json:"o,omitempty"`
	Token    int64  `json:"tok,omitempty"`
	Key      string `json:"key,omitempty"`
	Val      int64  `json:"v,omitempty"`
	Deadline int64  `json:"dl,omitempty"`
	OK       bool   `json:"ok,omitempty"`
	Err      string `json:"err,omitempty"`
	Note     string `json:"n,omitempty"`
}

// String is a compact one-line form for failure messages.
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s@%s", e.Kind, fmtNS(e.T))
	if e.T0 != 0 {
		fmt.Fprintf(&b, "(from %s)", fmtNS(e.T0))
	}
	for _, f := range []struct{ k, v string }{
		{"proc", e.Proc}, {"lock", e.Lock}, {"hold", e.Hold}, {"key", e.Key}, {"note", e.Note}, {"err", e.Err},
	} {
		if f.v != "" {
			fmt.Fprintf(&b, " %s=%s", f.k, f.v)
		}
	}
	if e.Token != 0 {
		fmt.Fprintf(&b, " token=%d", e.Token)
	}
	if e.Val != 0 {
		fmt.Fprintf(&b, " val=%d", e.Val)
	}
	if e.OK {
		b.WriteString(" ok")
	}
	return b.String()
}

// fmtNS prints a stamp as seconds with microseconds, enough to read orders.
func fmtNS(ns int64) string { return fmt.Sprintf("%d.%06d", ns/1e9, ns%1e9/1e3) }

// History is every event of one run, from every process.
type History []Event

// Sorted returns the events ordered by T (stable).
func (h History) Sorted() History {
	out := append(History(nil), h...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].T < out[j].T })
	return out
}

// Of returns the events of kind k.
func (h History) Of(k Kind) History {
	var out History
	for _, e := range h {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// Count returns how many events of kind k match keep (all if keep is nil).
func (h History) Count(k Kind, keep func(Event) bool) int {
	n := 0
	for _, e := range h {
		if e.Kind == k && (keep == nil || keep(e)) {
			n++
		}
	}
	return n
}

// Recorder collects events from any number of goroutines. The zero value
// is ready to use.
type Recorder struct {
	mu sync.Mutex
	h  History
	// Sink, if set, receives every event as well (a child worker streams
	// them to its parent).
	Sink func(Event)
}

// Add records e, stamping T with Now if it is zero.
func (r *Recorder) Add(e Event) {
	if e.T == 0 {
		e.T = Now()
	}
	r.mu.Lock()
	r.h = append(r.h, e)
	sink := r.Sink
	r.mu.Unlock()
	if sink != nil {
		sink(e)
	}
}

// AddAll records events stamped elsewhere (a child's stream).
func (r *Recorder) AddAll(h History) {
	r.mu.Lock()
	r.h = append(r.h, h...)
	r.mu.Unlock()
}

// History returns a copy of what was recorded so far.
func (r *Recorder) History() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(History(nil), r.h...)
}

// Encoder writes events as JSON lines, each prefixed with LinePrefix so
// that a reader can tell them from other output. It is safe for concurrent
// use.
type Encoder struct {
	mu sync.Mutex
	w  io.Writer
}

// LinePrefix starts every event line of an Encoder.
const LinePrefix = "chaos-event "

// NewEncoder returns an Encoder writing to w.
func NewEncoder(w io.Writer) *Encoder { return &Encoder{w: w} }

// Encode writes e as one line.
func (enc *Encoder) Encode(e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	enc.mu.Lock()
	defer enc.mu.Unlock()
	_, err = fmt.Fprintf(enc.w, "%s%s\n", LinePrefix, b)
	return err
}

// Decode reads event lines from r until EOF, calling fn for each event and
// other for every other line (other may be nil).
func Decode(r io.Reader, fn func(Event), other func(line string)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, LinePrefix)
		if !ok {
			if other != nil {
				other(line)
			}
			continue
		}
		var e Event
		if err := json.Unmarshal([]byte(rest), &e); err != nil {
			return fmt.Errorf("chaos: bad event line %q: %w", line, err)
		}
		fn(e)
	}
	return sc.Err()
}
