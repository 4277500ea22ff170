package notify

import (
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"
)

type expectKey struct{ channel, owner string }

// Grant is a grant received for a waiter: the release script made it the
// lock's owner with this fencing token, for a claim window of px.
type Grant struct {
	Fence int64
	PX    time.Duration
	// AtUs is when it was granted, in µs: of the server's clock for a
	// grant message, of this host's for one delivered by this client's
	// release (Deliver); 0 unknown.
	AtUs int64
}

// expect reports whether channel's subscription is in place, so that a
// message published from now on reaches this client, and if so keeps any
// grant to owner that arrives before owner's waiter registers. Call it
// right before an attempt that may queue owner, and forget when the
// attempt ends without a wait.
func (n *Notifier) Expect(channel, owner string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := n.channels[channel]
	if cs == nil || !cs.confirmed {
		return false
	}
	if n.expected == nil {
		n.expected = make(map[expectKey]*Grant)
	}
	n.expected[expectKey{channel, owner}] = nil
	return true
}

// forget drops what expect arranged for owner.
func (n *Notifier) Forget(channel, owner string) {
	n.mu.Lock()
	delete(n.expected, expectKey{channel, owner})
	n.mu.Unlock()
}

// Message implements driver.Handler. A grant reads "<fence> <px ms> <owner>";
// anything else wakes every waiter on the channel to ask the server again.
func (n *Notifier) Message(channel, payload string) {
	if g, owner, ok := ParseGrant(payload); ok {
		n.deliverGrant(channel, owner, g)
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.wakeAllLocked(channel)
}

// Reset implements driver.Handler: messages may have been lost while the
// subscription was down, or its Redis client was closed, so every waiter
// asks the server again.
func (n *Notifier) Reset() {
	n.mu.Lock()
	waiting := 0
	for _, cs := range n.channels {
		for _, list := range cs.waiters {
			for _, w := range list {
				w.Wake(nil)
				waiting++
			}
		}
	}
	for k, g := range n.expected { // see wakeAllLocked
		if g == nil {
			n.expected[k] = askAgain
		}
	}
	n.mu.Unlock()
	n.logger.Info("dlock: pub/sub subscription reset (reconnected, or its Redis client closed); waiters ask the server again", slog.Int("waiters", waiting))
}

// deliver passes a grant to the local waiter that owns it, if it is still
// waiting. A release by this client delivers directly, usually ahead of the
// message (a waiter keeps the first grant it hears of), so the grant is
// stamped here, as the release's reply comes: its hand-off latency is then
// measured on this host's clock alone, as a local hand-off's is from its
// transfer's reply.
func (n *Notifier) Deliver(channel, owner string, fence int64, px time.Duration) {
	n.deliverGrant(channel, owner, Grant{Fence: fence, PX: px, AtUs: time.Now().UnixMicro()})
}

// deliverGrant is deliver for a grant heard with its time.
func (n *Notifier) deliverGrant(channel, owner string, g Grant) {
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := n.channels[channel]
	if cs == nil {
		return
	}
	waiters := cs.waiters[owner]
	if len(waiters) == 0 {
		if _, ok := n.expected[expectKey{channel, owner}]; ok {
			n.expected[expectKey{channel, owner}] = &g
		}
		return
	}
	for i, w := range waiters {
		if i == 0 {
			w.Wake(&g)
		} else {
			w.Wake(nil) // the owner holds it now: the others join it
		}
	}
}

// wakeAllLocked asks every waiter on channel to ask the server again,
// including those whose first attempt is in flight (expect): its reply may
// predate what the wake-up stands for, and its waiter registers only after
// it, when the wake-up has gone by.
func (n *Notifier) wakeAllLocked(channel string) {
	n.wakeMatchingLocked(channel, func(string) bool { return true })
}

// askAgain, kept as an expected owner's grant, is a wake-up without a grant
// (wakeMatching) that came before the owner's waiter registered.
var askAgain = new(Grant)

// wakeMatching asks every waiter on channel whose grants name an owner that
// match accepts to ask the server again, including those whose first
// attempt is still in flight (expect). A reentrant lock's holds queue apart
// (each names its own hold), so when one is granted, the owner's others
// join it at once instead of waiting for a poll.
func (n *Notifier) WakeMatching(channel string, match func(owner string) bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.wakeMatchingLocked(channel, match)
}

// wakeMatchingLocked is WakeMatching under n.mu.
func (n *Notifier) wakeMatchingLocked(channel string, match func(owner string) bool) {
	if cs := n.channels[channel]; cs != nil {
		for owner, list := range cs.waiters {
			if match(owner) {
				for _, w := range list {
					w.Wake(nil)
				}
			}
		}
	}
	for k, g := range n.expected {
		if g == nil && k.channel == channel && match(k.owner) {
			n.expected[k] = askAgain
		}
	}
}

// ParseGrant reads "<fence> <px> <granted at µs> <owner>".
func ParseGrant(payload string) (g Grant, owner string, ok bool) {
	f, rest, ok1 := strings.Cut(payload, " ")
	p, rest, ok2 := strings.Cut(rest, " ")
	at, owner, ok3 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || !ok3 || owner == "" {
		return Grant{}, "", false
	}
	fence, err1 := strconv.ParseInt(f, 10, 64)
	ms, err2 := strconv.ParseInt(p, 10, 64)
	atUs, err3 := strconv.ParseInt(at, 10, 64)
	// A claim window beyond what a Duration holds would overflow to a
	// negative one (FuzzGrantMessage).
	if err1 != nil || err2 != nil || err3 != nil || ms <= 0 || ms > int64(math.MaxInt64/time.Millisecond) || atUs < 0 {
		return Grant{}, "", false
	}
	return Grant{Fence: fence, PX: time.Duration(ms) * time.Millisecond, AtUs: atUs}, owner, true
}

// wake records a grant (nil: just ask again) and signals the waiter.
func (w *Waiter) Wake(g *Grant) {
	if g != nil {
		w.mu.Lock()
		if w.grant == nil {
			w.grant = g
		}
		w.mu.Unlock()
	}
	select {
	case w.Signal <- struct{}{}:
	default:
	}
}

// takeGrant returns the grant received, if any.
func (w *Waiter) TakeGrant() (*Grant, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.grant
	w.grant = nil
	return g, g != nil
}
