package dlock

// LocalWaiters returns how many goroutines of c wait in its local queue(s)
// for the Mutex called name (under the default key prefix), so tests can
// wait for them to line up.
func LocalWaiters(c *Client, name string) int {
	c.local.mu.Lock()
	defer c.local.mu.Unlock()
	n := 0
	for k, q := range c.local.queues {
		if k.lock == "dlock:{"+name+"}" {
			n += len(q.waiters)
		}
	}
	return n
}

// MaxLocalHandoffs is how many local hand-offs an Unlock makes in a row.
const MaxLocalHandoffs = maxLocalHandoffs
