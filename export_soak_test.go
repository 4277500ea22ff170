package dlock

import (
	"time"

	"github.com/dlock-go/dlock/internal/hold"
	"github.com/dlock-go/dlock/internal/notify"
)

// Hooks for the soak tests (soak_test.go): what a long-running Client keeps
// in memory, so that they can check it all goes once the work is done.

// SetSubscriptionLinger sets how long c keeps a channel subscribed after its
// last waiter left (30 s otherwise). Call it before c is used.
func SetSubscriptionLinger(c *Client, d time.Duration) { c.notify.SetLinger(d) }

// SetRedlockSubscriptionLinger is SetSubscriptionLinger for every node of r.
func SetRedlockSubscriptionLinger(r *Redlock, d time.Duration) {
	for _, n := range r.nodes {
		n.notify.SetLinger(d)
	}
}

// Retained counts what a Client (or a Redlock) keeps per lock name or per
// call: each must fall back to zero once nothing is held or waited for and
// the subscription linger has passed.
type Retained struct {
	Channels   int // channels the notifier(s) know, subscribed or lingering
	Waiters    int // waiters registered on them
	Expected   int // owners whose first attempt's grant the notifier keeps
	Queues     int // local queues (Client), or a Redlock's and its listeners
	Anchors    int // reentrant owners' shared renewals
	Leases     int // leases the watchdog watches
	LossFuncs  int // loss callbacks on the leases watched
	LeaseSlots int // capacity of the watchdog's heap
}

// Records counts the per-name and per-lease records r holds: all but the
// heap's capacity, which keeps its peak.
func (r Retained) Records() int {
	return r.Channels + r.Waiters + r.Expected + r.Queues + r.Anchors + r.Leases + r.LossFuncs
}

// ClientRetained returns what c retains now.
func ClientRetained(c *Client) Retained {
	var r Retained
	notifierRetained(c.notify, &r)
	r.Queues, _, _ = c.local.Count(func(localQueueKey) bool { return true })
	r.Anchors = c.anchors.count()
	watchdogRetained(c.wd, &r)
	return r
}

// RedlockRetained returns what r retains now.
func RedlockRetained(rl *Redlock) Retained {
	var r Retained
	for _, n := range rl.nodes {
		notifierRetained(n.notify, &r)
	}
	r.Queues, _, _ = rl.line.Count(func(string) bool { return true })
	rl.ears.mu.Lock()
	r.Queues += len(rl.ears.ears)
	rl.ears.mu.Unlock()
	watchdogRetained(rl.wd, &r)
	return r
}

func notifierRetained(n *notify.Notifier, r *Retained) {
	c := n.Counts()
	r.Channels += c.Channels
	r.Waiters += c.Waiters
	r.Expected += c.Expected
}

func watchdogRetained(w *hold.Watchdog, r *Retained) {
	c := w.Counts()
	r.Leases, r.LeaseSlots, r.LossFuncs = c.Leases, c.Slots, c.LossFuncs
}
