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
		// visited, then dropped. (As two edges at one time it sorted end
		// first, and stayed believed to the end of the history.)
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

// LostUpdates checks the unfenced counters incremented under the lock: the
// values read by successful increments of one key must all differ (two
// that read the same value lost one of the updates), and a Final value
// must equal the number of successful increments when none failed midway.
func LostUpdates(h History) []Violation {
	type counter struct {
		seen      map[int64]Event
		ok, error int
		final     *Event
	}
	keys := map[string]*counter{}
	get := func(k string) *counter {
		c := keys[k]
		if c == nil {
			c = &counter{seen: map[int64]Event{}}
			keys[k] = c
		}
		return c
	}
	var out []Violation
	for i, e := range h {
		switch e.Kind {
		case RMW:
			c := get(e.Key)
			if !e.OK {
				c.error++
				continue
			}
			c.ok++
			if prev, dup := c.seen[e.Val]; dup {
				out = append(out, Violation{CheckLostUpdate,
					fmt.Sprintf("key %q: holds %s and %s both read %d and wrote %d", e.Key, prev.Hold, e.Hold, e.Val, e.Val+1),
					[]Event{prev, e}})
			}
			c.seen[e.Val] = e
		case Final:
			get(e.Key).final = &h[i]
		}
	}
	for k, c := range keys {
		if c.final != nil && c.error == 0 && c.final.Val != int64(c.ok) {
			out = append(out, Violation{CheckLostUpdate,
				fmt.Sprintf("key %q: %d increments succeeded but the value is %d", k, c.ok, c.final.Val),
				[]Event{*c.final}})
		}
	}
	return sortViolations(out)
}

// StaleAccepted finds fenced-store operations that should have been
// refused: an operation of hold A accepted although, before it was invoked,
// the store had already accepted an operation of a hold B whose acquisition
// began after A's had returned (so B was granted the lock after A, and A's
// grant was over). It judges the store by the order of grants, not by the
// tokens, so a store fed regressing tokens is caught too.
func StaleAccepted(h History) []Violation {
	hs := holds(h)
	byKey := map[string][]Event{}
	for _, e := range h {
		if e.Kind == Write && e.OK && hs[e.Hold] != nil {
			byKey[e.Key] = append(byKey[e.Key], e)
		}
	}
	var out []Violation
	for _, ops := range byKey {
		byEnd := append([]Event(nil), ops...)
		sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].T < byEnd[j].T })
		byStart := append([]Event(nil), ops...)
		sort.Slice(byStart, func(i, j int) bool { return byStart[i].T0 < byStart[j].T0 })
		var (
			next      int
			latest    int64 // latest acquisition start among ops completed so far
			latestOp  Event
			haveLater bool
		)
		for _, a := range byStart {
			for next < len(byEnd) && byEnd[next].T < a.T0 {
				b := byEnd[next]
				if s := hs[b.Hold].acq.T0; !haveLater || s > latest {
					latest, latestOp, haveLater = s, b, true
				}
				next++
			}
			if haveLater && latest > hs[a.Hold].acq.T {
				out = append(out, Violation{CheckStaleAccepted,
					fmt.Sprintf("key %q: %s by hold %s (token %d) accepted after %s by the later hold %s (token %d)",
						a.Key, a.Note, a.Hold, a.Token, latestOp.Note, latestOp.Hold, latestOp.Token),
					[]Event{latestOp, a}})
			}
		}
	}
	return sortViolations(out)
}

// TokenOrder checks that fencing tokens of one lock increase with every
// grant: an acquisition that returned before another was invoked must have
// the smaller token. Zero tokens (Redlock) are skipped.
func TokenOrder(h History) []Violation {
	byLock := map[string][]Event{}
	for _, e := range h {
		if e.Kind == Acquire && e.OK && e.Token != 0 {
			byLock[e.Lock] = append(byLock[e.Lock], e)
		}
	}
	var out []Violation
	for lock, acqs := range byLock {
		byEnd := append([]Event(nil), acqs...)
		sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].T < byEnd[j].T })
		sort.Slice(acqs, func(i, j int) bool { return acqs[i].T0 < acqs[j].T0 })
		var (
			next int
			max  *Event
		)
		for _, b := range acqs {
			for next < len(byEnd) && byEnd[next].T < b.T0 {
				if max == nil || byEnd[next].Token > max.Token {
					e := byEnd[next]
					max = &e
				}
				next++
			}
			if max != nil && b.Token <= max.Token {
				out = append(out, Violation{CheckTokenOrder,
					fmt.Sprintf("lock %q: hold %s got token %d after hold %s had got %d", lock, b.Hold, b.Token, max.Hold, max.Token),
					[]Event{*max, b}})
			}
		}
	}
	return sortViolations(out)
}

// ForeignOps finds releases (Release events) and renewals (Cmd "renew"
// events) of hold A that succeeded although a hold B of the same lock had
// been granted after A (B's acquisition began after A's returned) and had
// returned before the operation began. B's grant replaced A's value in the
// key, and nothing may ever put it back (see Recreated), so the operation
// cannot have found A's lock: it released or renewed someone else's, or
// claimed a success it did not have. Readers of a read-write lock (Acquire
// Note ModeRead) share it, so a reader's grant ends no other reader's.
func ForeignOps(h History) []Violation {
	hs := holds(h)
	byOwner := map[string]*holdInfo{}
	byLock := map[string][]*holdInfo{}
	for _, hi := range hs {
		byOwner[hi.acq.Owner] = hi
		byLock[hi.acq.Lock] = append(byLock[hi.acq.Lock], hi)
	}
	var out []Violation
	for _, e := range h {
		var (
			self  *holdInfo
			check string
		)
		switch {
		case e.Kind == Release && e.OK:
			self, check = hs[e.Hold], CheckForeignRelease
		case e.Kind == Cmd && e.Note == "renew" && e.OK:
			self, check = byOwner[e.Owner], CheckForeignExtend
		}
		if self == nil {
			continue
		}
		for _, other := range byLock[self.acq.Lock] {
			if other == self || (other.reads() && self.reads()) {
				continue
			}
			if other.acq.T0 > self.acq.T && other.acq.T < e.T0 {
				out = append(out, Violation{check,
					fmt.Sprintf("lock %q: hold %s succeeded after hold %s was granted the lock", self.acq.Lock, self.acq.Hold, other.acq.Hold),
					[]Event{self.acq, other.acq, e}})
				break
			}
		}
	}
	return sortViolations(out)
}

// wipes returns the Fault "wipe" events: a restart that lost the data (or
// the keys deleted), from T0 (before the data was lost) to T (the server
// is back, empty). A wipe without T0 is instantaneous.
func wipes(h History) []Event {
	var out []Event
	for _, e := range h {
		if e.Kind == Fault && e.Note == "wipe" {
			if e.T0 == 0 {
				e.T0 = e.T
			}
			out = append(out, e)
		}
	}
	return out
}

// Recreated finds lost locks brought back: a Probe, sent after a wipe
// ended, that shows the key holding the value of a hold granted before the
// wipe began.
func Recreated(h History) []Violation {
	byOwner := map[string]*holdInfo{}
	for _, hi := range holds(h) {
		byOwner[hi.acq.Owner] = hi
	}
	ws := wipes(h)
	var out []Violation
	for _, e := range h {
		if e.Kind != Probe || e.Owner == "" {
			continue
		}
		hi := byOwner[e.Owner]
		if hi == nil {
			continue
		}
		for _, w := range ws {
			if hi.acq.T < w.T0 && w.T < start(e) && (w.Lock == "" || w.Lock == hi.acq.Lock) {
				out = append(out, Violation{CheckRecreated,
					fmt.Sprintf("lock %q: hold %s granted before the wipe at %s is back at %s", hi.acq.Lock, hi.acq.Hold, fmtNS(w.T0), fmtNS(e.T)),
					[]Event{hi.acq, w, e}})
				break
			}
		}
	}
	return sortViolations(out)
}

// Unreported finds holds that a wipe took (granted before it began, not
// released before it began, and not released successfully at all) whose
// holder never learned it: neither a Lost event nor a Release that failed
// with "not-held".
func Unreported(h History) []Violation {
	ws := wipes(h)
	var out []Violation
	for _, hi := range holds(h) {
		for _, w := range ws {
			if w.Lock != "" && w.Lock != hi.acq.Lock {
				continue
			}
			if hi.acq.T >= w.T0 || (hi.release != nil && (hi.release.OK || hi.release.T0 < w.T0)) {
				continue
			}
			if hi.lost != nil || (hi.release != nil && IsErr(hi.release.Err, ErrNotHeld)) {
				continue
			}
			out = append(out, Violation{CheckUnreported,
				fmt.Sprintf("lock %q: hold %s was wiped at %s and its holder was never told", hi.acq.Lock, hi.acq.Hold, fmtNS(w.T0)),
				[]Event{hi.acq, w}})
			break
		}
	}
	return sortViolations(out)
}

// NoTTL finds probes of keys that exist without an expiry.
func NoTTL(h History) []Violation {
	var out []Violation
	for _, e := range h {
		if e.Kind == Probe && e.Val == -1 {
			out = append(out, Violation{CheckNoTTL, fmt.Sprintf("key %q has no expiry", e.Key), []Event{e}})
		}
	}
	return sortViolations(out)
}

// RenewAfterRelease finds renewals sent after the release script of the
// same owner was sent (both Cmd events of one client): Unlock must stop the
// watchdog, and wait for a renewal in flight, before it releases.
func RenewAfterRelease(h History) []Violation {
	released := map[string]Event{}
	for _, e := range h {
		if e.Kind == Cmd && e.Note == "release" {
			if prev, ok := released[e.Owner]; !ok || e.T0 < prev.T0 {
				released[e.Owner] = e
			}
		}
	}
	var out []Violation
	for _, e := range h {
		if e.Kind != Cmd || e.Note != "renew" {
			continue
		}
		if r, ok := released[e.Owner]; ok && e.T0 > r.T0 {
			out = append(out, Violation{CheckRenewAfter,
				fmt.Sprintf("owner %.8s…: renewal sent %s after the release", e.Owner, fmtDur(e.T0-r.T0)),
				[]Event{r, e}})
		}
	}
	return sortViolations(out)
}

// LateLosses finds losses seen more than slack after the lease's validity
// deadline (Lost events with a Deadline).
func LateLosses(h History, slack int64) []Violation {
	var out []Violation
	for _, e := range h {
		if e.Kind == Lost && e.Deadline != 0 && e.T-e.Deadline > slack {
			out = append(out, Violation{CheckLateLoss,
				fmt.Sprintf("hold %s: loss seen %s after its validity deadline (allowed %s)", e.Hold, fmtDur(e.T-e.Deadline), fmtDur(slack)),
				[]Event{e}})
		}
	}
	return sortViolations(out)
}

// EarlyWaits finds Latch.Wait calls on a latch of count n that returned
// successfully before the n-th CountDown of it had even been invoked.
func EarlyWaits(h History, n int) []Violation {
	counts := map[string][]int64{}
	for _, e := range h {
		if e.Kind == CountDown {
			counts[e.Lock] = append(counts[e.Lock], e.T0)
		}
	}
	for _, c := range counts {
		sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	}
	var out []Violation
	for _, e := range h {
		if e.Kind != Await || e.Note != "returned" || !e.OK {
			continue
		}
		c := counts[e.Lock]
		if len(c) < n || e.T < c[n-1] {
			out = append(out, Violation{CheckEarlyWait,
				fmt.Sprintf("latch %q: a Wait returned at %s before the %d-th CountDown was invoked", e.Lock, fmtNS(e.T), n),
				[]Event{e}})
		}
	}
	return sortViolations(out)
}

// Reentries checks the nested holds of reentrant locks (Reenter events),
// all taken and given back by holders that held the lock: every nested Lock
// and Unlock must succeed, and a nested Lock must return the token of the
// grant it nests in, which every hold of one owner shares.
func Reentries(h History) []Violation {
	hs := holds(h)
	var out []Violation
	for _, e := range h {
		if e.Kind != Reenter {
			continue
		}
		hi := hs[e.Hold]
		switch {
		case !e.OK:
			out = append(out, Violation{CheckReentry,
				fmt.Sprintf("lock %q: nested %s by hold %s failed: %s", e.Lock, e.Note, e.Hold, e.Err), []Event{e}})
		case e.Note == "lock" && hi != nil && e.Token != hi.acq.Token:
			out = append(out, Violation{CheckReentry,
				fmt.Sprintf("lock %q: nested lock by hold %s got token %d, its grant %d", e.Lock, e.Hold, e.Token, hi.acq.Token),
				[]Event{hi.acq, e}})
		}
	}
	return sortViolations(out)
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
