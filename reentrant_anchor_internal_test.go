package dlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/hold"
	"github.com/dlock-go/dlock/internal/ownerid"
)

// Two holds of one grant that each make an anchor at the same moment end
// up on one: the one the set took first. The other anchor retires, and the
// last of the two holds ends the one left.
func TestReentrantAnchorsMadeAtOnceBecomeOne(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	m := c.ReentrantMutex(t.Name())
	key := anchorKey{lock: m.keys.lock, grant: strings.Repeat("a", ownerid.IDLen) + "owner"}
	x, y := &reentrantHold{m: m}, &reentrantHold{m: m}
	init := func(h *reentrantHold) func(*anchor) {
		return func(a *anchor) {
			h.lease = Lease{h: h, cfg: &m.cfg, token: a.lease.token}
			h.lease.s.Init(c.wd, (*leaseHost)(&h.lease), "hold", hold.Settings{TTL: m.cfg.ttl}, &a.lease.s)
		}
	}
	// attach is makeLease's: a full grant needs no claim, so nothing is sent.
	attach := func(h *reentrantHold, meanwhile func()) *anchor {
		if a, ended := c.anchors.join(key, &h.lease.s, init(h)); a != nil || ended != nil {
			t.Fatalf("join found an anchor: %v, %v", a, ended)
		}
		n := &anchor{reentrantOwner: (*reentrantOwner)(m), key: key}
		first := func() { init(h)(n); h.lease.s.AdoptFirst() }
		if err := n.lease.startNest(context.Background(), c.wd, n, &m.cfg, key.grant, 1, time.Now(), m.cfg.ttl, first); err != nil {
			t.Fatal(err)
		}
		meanwhile()
		return c.anchors.settle(n, nil, &h.lease.s)
	}
	var ay *anchor
	ax := attach(x, func() { ay = attach(y, func() {}) }) // y makes and settles its own meanwhile
	if ax != ay {
		t.Error("the hold that made its anchor second is not on the set's")
	}
	if n, w := c.anchors.count(), c.watched(); n != 1 || w != 1 {
		t.Errorf("%d anchors in the set and %d leases watched, want 1 and 1", n, w)
	}
	for i, h := range []*reentrantHold{x, y} {
		if err := h.lease.s.BeginUnlock(context.Background(), false); err != nil {
			t.Fatalf("hold %d: %v", i, err)
		}
		h.lease.s.EndUnlock(nil)
		if i == 0 && c.anchors.count() != 1 {
			t.Error("the anchor left the set with a hold still on it")
		}
	}
	if n, w := c.anchors.count(), c.watched(); n != 0 || w != 0 {
		t.Errorf("after both holds: %d anchors in the set and %d leases watched, want none", n, w)
	}
	if err := ax.lease.s.Err(); err != errReleased {
		t.Errorf("the anchor after its last hold: Err = %v, want released", err)
	}
}
