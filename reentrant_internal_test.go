package dlock

import (
	"context"
	"testing"
)

func TestReentrantHoldsShareOneWatchedLease(t *testing.T) {
	c := sharedClient(t)
	ctx := WithOwner(context.Background(), "job")
	m := c.ReentrantMutex(t.Name())
	var leases []*Lease
	for i := 0; i < 5; i++ {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	if n := c.watched(); n != 1 {
		t.Errorf("the watchdog watches %d leases for one owner's 5 holds, want 1", n)
	}
	for _, l := range leases {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.watched(); n != 0 {
		t.Errorf("the watchdog still watches %d leases after every hold was unlocked", n)
	}
}

// watched is how many leases the watchdog watches.
func (c *Client) watched() int {
	return c.wd.Counts().Leases
}
