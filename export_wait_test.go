package dlock

import (
	"time"

	"github.com/dlock-go/dlock/internal/wait"
)

// LocalWaiters returns how many goroutines of c wait in its local queue(s)
// for the Mutex called name (under the default key prefix), so tests can
// wait for them to line up.
func LocalWaiters(c *Client, name string) int {
	_, n, _ := c.local.Count(func(k localQueueKey) bool { return k.lock == "dlock:{"+name+"}" })
	return n
}

// LineWaiters returns how many goroutines of c wait in its local line for
// the lock whose key is lockKey (a ReentrantMutex's ends in ":re").
func LineWaiters(c *Client, lockKey string) int {
	_, n, _ := c.local.Count(func(k localQueueKey) bool { return k.lock == lockKey })
	return n
}

// MaxLocalHandoffs is how many local hand-offs an Unlock makes in a row.
const MaxLocalHandoffs = wait.MaxLocalHandoffs

// SetStandbyGrace sets how long the first local waiter of c's turn on a
// lock waits for a local hand-off before it queues in Redis itself; call it
// before c's first Lock.
func SetStandbyGrace(c *Client, d time.Duration) { c.local.SetGrace(d) }

// GrantWaiters returns how many waits of c are registered for grants on
// channel (a lock's key, for a Mutex), so tests can tell that a wait is
// listening before they let a grant through.
func GrantWaiters(c *Client, channel string) int { return c.notify.Waiters(channel) }

// FairGrantChannel is the channel c's FairMutex waiters for name hear their
// grants on.
func FairGrantChannel(c *Client, name string) string {
	_, grants := newFairKeys(c.cfg.keyPrefix, name, c.grantTag)
	return grants
}

// Subscribed reports whether c's subscription to channel (a lock's key,
// for a Mutex) is confirmed, so tests can have a wait begin with it in
// place.
func Subscribed(c *Client, channel string) bool { return c.notify.Confirmed(channel) }
