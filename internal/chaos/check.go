package chaos

import (
	"fmt"
	"sort"
	"strings"
)

// The checkers. Each is a pure function over a History and returns the
// violations it proves, oldest first, or none. Names are the Check field of
// the violations they return.
const (
	CheckOverlap        = "overlapping holds"
	CheckLostUpdate     = "lost update"
	CheckStaleAccepted  = "stale fenced operation accepted"
	CheckTokenOrder     = "fencing token regression"
	CheckForeignRelease = "release of someone else's lock"
	CheckForeignExtend  = "renewal of someone else's lock"
	CheckRecreated      = "lost lock re-created"
	CheckUnreported     = "lost lock never reported"
	CheckNoTTL          = "key without a TTL"
	CheckRenewAfter     = "renewal after Unlock"
	CheckLateLoss       = "loss signalled late"
	CheckEarlyWait      = "latch released early"
	CheckReentry        = "nested hold failed"
)

// Violation is one proven breach of an invariant.
type Violation struct {
	Check  string
	Msg    string
	Events []Event // the evidence
}

func (v Violation) String() string { return v.Check + ": " + v.Msg }

// holdInfo is what the history says about one acquisition.
type holdInfo struct {
	acq      Event
	lastHeld int64 // latest Held stamp; acq.T when there is none
	release  *Event
	lost     *Event
}

// reads reports whether the hold is a reader of a read-write lock.
func (hi *holdInfo) reads() bool { return hi.acq.Note == ModeRead }

// holds indexes successful acquisitions by hold id.
func holds(h History) map[string]*holdInfo {
	m := make(map[string]*holdInfo)
	for _, e := range h {
		if e.Kind == Acquire && e.OK && e.Hold != "" {
			m[e.Hold] = &holdInfo{acq: e, lastHeld: e.T}
		}
	}
	for i := range h {
		e := &h[i]
		hi := m[e.Hold]
		if hi == nil {
			continue
		}
		switch e.Kind {
		case Held:
			if e.T > hi.lastHeld {
				hi.lastHeld = e.T
			}
		case Release:
			hi.release = e
		case Lost:
			hi.lost = e
		}
	}
	return m
}

// Overlaps finds moments where more than capacity holders of one lock
// believed they held it (capacity 1 for a mutex). Readers of a read-write
// lock (holds whose Acquire has Note ModeRead) may hold it together, but
// never with any other holder: capacity counts the others. A hold is
// believed from when its acquisition returned to its last Held stamp: both
// ends are on the safe side, so every overlap found is real. It does not
// apply to runs that pause holders, which cannot know they were paused
// (fencing is the answer there).
//
// slack tolerates beliefs that outlast the grant of the next holder by at
// most that much (a watchdog that fired a little late on a loaded machine);
// zero tolerates nothing.
func Overlaps(h History, capacity int, slack int64) []Violation {
	var out []Violation
	sweep(h, slack, func(lock string, at int64, active map[*holdInfo]bool) {
		readers := 0
		for hi := range active {
			if hi.reads() {
				readers++
			}
		}
		others := len(active) - readers
		if others <= capacity && (readers == 0 || others == 0) {
			return
		}
		var ev []Event
		for hi := range active {
			ev = append(ev, hi.acq)
		}
		sort.Slice(ev, func(i, j int) bool { return ev[i].T < ev[j].T })
		msg := fmt.Sprintf("lock %q: %d holders at %s, capacity %d", lock, len(active), fmtNS(at), capacity)
		if readers > 0 {
			msg = fmt.Sprintf("lock %q: %d holders at %s, %d of them reading", lock, len(active), fmtNS(at), readers)
		}
		out = append(out, Violation{CheckOverlap, msg, ev})
	})
	return sortViolations(out)
}

// MostHeld returns the most holds of one lock believed at once (as
// Overlaps counts them, with no slack), among the holds whose Acquire
// matches keep (all if keep is nil). A scenario checks with it that the
// sharing it meant to test did happen: a semaphore's limit reached,
// readers holding together.
func MostHeld(h History, keep func(Event) bool) int {
	most := 0
	sweep(h, 0, func(_ string, _ int64, active map[*holdInfo]bool) {
		n := 0
		for hi := range active {
			if keep == nil || keep(hi.acq) {
				n++
			}
		}
		most = max(most, n)
	})
	return most
}

// sweep walks the holds of each lock in time order and calls visit with
// the holds believed at that moment each time one begins, the new one
// included. A hold is believed from when its acquisition returned to its
// last Held stamp, less slack; holds that merely touch do not overlap.
func sweep(h History, slack int64, visit func(lock string, at int64, active map[*holdInfo]bool)) {
	type edge struct {
		at    int64
		start bool
		hold  *holdInfo
		// instant marks the start of a hold believed only as its
		// acquisition returned (lost at once, or within the slack): it is
		// visited, then dropped. Two edges at one time would sort end first
		// and leave the hold believed to the end of the history.
		instant bool
	}
	byLock := map[string][]edge{}
	for _, hi := range holds(h) {
		end := max(hi.acq.T, hi.lastHeld-slack)
		if end == hi.acq.T {
			byLock[hi.acq.Lock] = append(byLock[hi.acq.Lock], edge{at: hi.acq.T, start: true, hold: hi, instant: true})
			continue
		}
		byLock[hi.acq.Lock] = append(byLock[hi.acq.Lock], edge{at: hi.acq.T, start: true, hold: hi}, edge{at: end, hold: hi})
	}
	for lock, edges := range byLock {
		sort.Slice(edges, func(i, j int) bool {
			if edges[i].at != edges[j].at {
				return edges[i].at < edges[j].at
			}
			return !edges[i].start && edges[j].start // touching is not overlapping
		})
		active := map[*holdInfo]bool{}
		for _, e := range edges {
			if !e.start {
				delete(active, e.hold)
				continue
			}
			active[e.hold] = true
			visit(lock, e.at, active)
			if e.instant {
				delete(active, e.hold)
			}
		}
	}
}

// All runs every checker that applies to any run without paused holders,
// for a lock of the given capacity: 1 for a mutex, and for a read-write
// lock, whose readers the checkers tell by their Acquire's Note. With a
// capacity above 1 (a semaphore) holders coexist, so ForeignOps, which
// assumes a grant ends the previous one, does not apply.
func All(h History, capacity int, slack int64) []Violation {
	var out []Violation
	out = append(out, Overlaps(h, capacity, slack)...)
	for _, v := range Safety(h) {
		if capacity > 1 && (v.Check == CheckForeignRelease || v.Check == CheckForeignExtend) {
			continue
		}
		out = append(out, v)
	}
	return out
}

// Safety runs the checkers that hold even when holders are paused: those
// about the store, the tokens and the keys, not about beliefs.
func Safety(h History) []Violation {
	var out []Violation
	out = append(out, LostUpdates(h)...)
	out = append(out, StaleAccepted(h)...)
	out = append(out, TokenOrder(h)...)
	out = append(out, ForeignOps(h)...)
	out = append(out, Recreated(h)...)
	out = append(out, Unreported(h)...)
	out = append(out, NoTTL(h)...)
	out = append(out, RenewAfterRelease(h)...)
	return out
}

// Error classes that start an Event's Err, followed by ": " and the
// message.
const (
	ErrNotHeld     = "not-held"
	ErrNotObtained = "not-obtained"
	ErrLost        = "lost"
	ErrQuorum      = "quorum"
	ErrConflict    = "conflict"
	ErrInvalid     = "invalid"
	ErrStale       = "stale"
	ErrOther       = "error"
)

// IsErr reports whether an Event's Err is of class.
func IsErr(err, class string) bool {
	return err == class || strings.HasPrefix(err, class+":")
}

// CheckLeakedError is the check of ErrorsContaining.
const CheckLeakedError = "internal error reached a caller"

// ErrorsContaining finds events whose error mentions text (such as
// "NOSCRIPT", which the library must handle and never pass on).
func ErrorsContaining(h History, text string) []Violation {
	var out []Violation
	for _, e := range h {
		if e.Err != "" && strings.Contains(e.Err, text) {
			out = append(out, Violation{CheckLeakedError, fmt.Sprintf("%s returned %q", e.Kind, e.Err), []Event{e}})
		}
	}
	return sortViolations(out)
}

// ByCheck counts violations per check.
func ByCheck(vs []Violation) map[string]int {
	m := map[string]int{}
	for _, v := range vs {
		m[v.Check]++
	}
	return m
}

func sortViolations(vs []Violation) []Violation {
	sort.SliceStable(vs, func(i, j int) bool { return firstT(vs[i]) < firstT(vs[j]) })
	return vs
}

func firstT(v Violation) int64 {
	if len(v.Events) == 0 {
		return 0
	}
	return v.Events[len(v.Events)-1].T
}

// start is when an event's operation was invoked: T0, or T for an
// observation without one.
func start(e Event) int64 {
	if e.T0 != 0 {
		return e.T0
	}
	return e.T
}

func fmtDur(ns int64) string {
	return fmt.Sprintf("%.3fms", float64(ns)/1e6)
}
