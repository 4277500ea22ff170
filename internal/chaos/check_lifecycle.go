package chaos

import (
	"fmt"
	"sort"
)

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
