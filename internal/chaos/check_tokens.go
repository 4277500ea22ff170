package chaos

import (
	"fmt"
	"sort"
)

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
