package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jedib0t/go-pretty/v6/table"

	"github.com/dlock-go/dlock"
)

// The --json output of "dlock ls" and "dlock status": an array of lockJSON,
// one per name and kind of lock, sorted by name. It is a stable interface:
// fields are only ever added. Every field is always present; times are whole
// milliseconds; a field that does not apply to the kind is 0 or "".
type lockJSON struct {
	Name      string       `json:"name"`
	Kind      string       `json:"kind"`       // mutex, reentrant, rwmutex, semaphore, latch, election
	LastToken int64        `json:"last_token"` // last fencing token issued; 0: no longer known
	Limit     int          `json:"limit"`      // semaphore: limit stored by SetPermits or AddPermits; 0: none
	Count     int64        `json:"count"`      // latch: its count
	TTLMillis int64        `json:"ttl_ms"`     // latch: time until it expires
	Holders   []holderJSON `json:"holders"`    // in grant order; [] when free
	Waiters   []waiterJSON `json:"waiters"`    // in queue order
}

type holderJSON struct {
	Owner     string `json:"owner"`   // the holder's id
	Info      string `json:"info"`    // the owner info it chose, e.g. "host=api-7 pid=4121"
	Mode      string `json:"mode"`    // rwmutex: "read" or "write"
	Holds     int    `json:"holds"`   // reentrant: hold count
	Permits   int    `json:"permits"` // semaphore: permits held
	Token     int64  `json:"token"`   // its fencing token; 0: no longer known
	TTLMillis int64  `json:"ttl_ms"`  // time until it expires unless renewed
	// HeldForMillis is how long it has held the lock, by the server's
	// clock; 0 until a renewal recorded the hold's start (dlock.Holder).
	HeldForMillis int64 `json:"held_for_ms"`
}

type waiterJSON struct {
	Position        int    `json:"position"` // 1-based
	Owner           string `json:"owner"`
	Info            string `json:"info"`
	Mode            string `json:"mode"`
	Permits         int    `json:"permits"`       // semaphore: permits asked for
	LeaseLeftMillis int64  `json:"lease_left_ms"` // it leaves the queue if it does not refresh its place by then
	WaitedForMillis int64  `json:"waited_for_ms"` // how long it has waited, by the server's clock
}

func toJSON(infos []dlock.LockInfo) []lockJSON {
	out := make([]lockJSON, 0, len(infos))
	for _, info := range infos {
		l := lockJSON{
			Name: info.Name, Kind: string(info.Kind), LastToken: info.LastToken, Limit: info.Permits,
			Count: info.Count, TTLMillis: info.TTL.Milliseconds(),
			Holders: make([]holderJSON, 0, len(info.Holders)), Waiters: make([]waiterJSON, 0, len(info.Waiters)),
		}
		for _, h := range info.Holders {
			l.Holders = append(l.Holders, holderJSON{
				Owner: h.Owner, Info: h.Info, Mode: h.Mode, Holds: h.Holds, Permits: h.Permits,
				Token: h.Token, TTLMillis: h.TTL.Milliseconds(), HeldForMillis: h.HeldFor.Milliseconds(),
			})
		}
		for _, w := range info.Waiters {
			l.Waiters = append(l.Waiters, waiterJSON{
				Position: w.Position, Owner: w.Owner, Info: w.Info, Mode: w.Mode, Permits: w.Permits,
				LeaseLeftMillis: w.LeaseLeft.Milliseconds(), WaitedForMillis: w.WaitedFor.Milliseconds(),
			})
		}
		out = append(out, l)
	}
	return out
}

func writeJSON(w io.Writer, infos []dlock.LockInfo) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(toJSON(infos))
}

// newTable returns a table in the style of kubectl: no borders, columns
// apart, headers in capitals, empty columns left out.
func newTable() table.Writer {
	t := table.NewWriter()
	style := table.StyleDefault
	style.Options = table.Options{}
	style.Box.PaddingLeft = ""
	style.Box.PaddingRight = "   "
	t.SetStyle(style)
	t.SuppressEmptyColumns()
	t.SuppressTrailingSpaces()
	return t
}

// formatTTL rounds a remaining time for a table: 27.4s, 850ms, 23h59m.
func formatTTL(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}

// shortOwner shortens an owner id for a table: the 32 hex digits of an
// acquisition to 8; a reentrant owner "<instance>:<identity>" to its
// identity, after the instance's first 8 digits.
func shortOwner(owner string) string {
	id, identity, reentrant := strings.Cut(owner, ":")
	if len(id) > 8 {
		id = id[:8]
	}
	if reentrant {
		return id + ":" + identity
	}
	return id
}

// ownerLabel is what names a holder or waiter in a sentence: its info, or
// its id when it chose none.
func ownerLabel(owner, info string) string {
	if info != "" {
		return info
	}
	return shortOwner(owner)
}

// holdersSummary describes who holds a lock, for a row of "dlock ls".
func holdersSummary(info dlock.LockInfo) string {
	hs := info.Holders
	switch {
	case info.Kind == dlock.KindLatch:
		return fmt.Sprintf("count %d", info.Count)
	case len(hs) == 0:
		return "free"
	case info.Kind == dlock.KindSemaphore:
		n := 0
		for _, h := range hs {
			n += h.Permits
		}
		s := plural(int64(n), "permit", "permits")
		if info.Permits > 0 {
			s = fmt.Sprintf("%d of %s", n, plural(int64(info.Permits), "permit", "permits"))
		}
		if len(hs) == 1 {
			return s + " by " + ownerLabel(hs[0].Owner, hs[0].Info)
		}
		return fmt.Sprintf("%s by %d holders", s, len(hs))
	case info.Kind == dlock.KindRWMutex && len(hs) > 1:
		return fmt.Sprintf("%d readers", len(hs))
	}
	s := ownerLabel(hs[0].Owner, hs[0].Info)
	switch {
	case hs[0].Mode != "":
		s = hs[0].Mode + ": " + s
	case hs[0].Holds > 1:
		s += fmt.Sprintf(" (%d holds)", hs[0].Holds)
	}
	return s
}

// soonestTTL is the shortest remaining time among the holders, or the
// latch's.
func soonestTTL(info dlock.LockInfo) time.Duration {
	if info.Kind == dlock.KindLatch {
		return info.TTL
	}
	var least time.Duration
	for i, h := range info.Holders {
		if i == 0 || h.TTL < least {
			least = h.TTL
		}
	}
	return least
}

func formatToken(t int64) string {
	if t == 0 {
		return "-"
	}
	return fmt.Sprint(t)
}

// active reports whether a lock needs a look: held, waited for, or a latch
// still counting down (what its waiters wait for).
func active(info dlock.LockInfo) bool {
	return len(info.Holders) > 0 || len(info.Waiters) > 0 || (info.Kind == dlock.KindLatch && info.Count > 0)
}

// longestHold is the longest HeldFor among the holders.
func longestHold(info dlock.LockInfo) time.Duration {
	var d time.Duration
	for _, h := range info.Holders {
		d = max(d, h.HeldFor)
	}
	return d
}

// longestWait is the longest WaitedFor among the waiters.
func longestWait(info dlock.LockInfo) time.Duration {
	var d time.Duration
	for _, w := range info.Waiters {
		d = max(d, w.WaitedFor)
	}
	return d
}
