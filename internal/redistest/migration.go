package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// SlotMigration is a slot being moved from one master to another, begun by
// StartMigration. Between StartMigration and Finish the source answers ASK
// for keys it no longer has and the target accepts them only after ASKING,
// which is the state tests of redirection handling need.
type SlotMigration struct {
	Slot int     // the slot being moved
	From *Server // its owner when the migration started
	To   *Server // the master it moves to

	c      *Cluster
	fromID string
	toID   string
}

// MigrateSlot moves slot, with all its keys, from its current master to the
// master to (CLUSTER SETSLOT IMPORTING and MIGRATING, MIGRATE ... KEYS in
// batches, then SETSLOT NODE on both and on every other master), and waits
// until every running node agrees on the new owner. Clients that cached the
// old owner then get MOVED. It is a no-op when to already owns the slot.
func (c *Cluster) MigrateSlot(tb testing.TB, slot int, to *Server) {
	tb.Helper()
	if owner, _, err := c.ownerOf(slot); err == nil && owner == to {
		return
	}
	c.StartMigration(tb, slot, to).Finish(tb)
}

// StartMigration marks slot as importing on to and migrating on its current
// master, and moves no keys yet; see SlotMigration. It fails tb if to already
// owns the slot or is not a master.
func (c *Cluster) StartMigration(tb testing.TB, slot int, to *Server) *SlotMigration {
	tb.Helper()
	from, fromID, err := c.ownerOf(slot)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	if from == to {
		tb.Fatalf("redistest: %s already owns slot %d", to.Addr(), slot)
	}
	toID, err := c.nodeID(to)
	if err != nil {
		tb.Fatalf("redistest: CLUSTER MYID on %s: %v", to.Addr(), err)
	}
	m := &SlotMigration{c: c, Slot: slot, From: from, To: to, fromID: fromID, toID: toID}
	// Importing first, as the Redis manual orders it: a client redirected
	// by ASK must find the target ready.
	m.setslot(tb, to, "IMPORTING", fromID)
	m.setslot(tb, from, "MIGRATING", toID)
	return m
}

func (m *SlotMigration) setslot(tb testing.TB, s *Server, args ...string) {
	tb.Helper()
	all := append([]string{"CLUSTER", "SETSLOT", strconv.Itoa(m.Slot)}, args...)
	if _, err := ctl(s.Addr(), m.c.password, all...); err != nil {
		tb.Fatalf("redistest: %s on %s: %v", strings.Join(all, " "), s.Addr(), err)
	}
}

// MoveKeys moves the given keys of the slot to the target with MIGRATE, or,
// with no keys given, every key still in the slot on the source. Keys that
// are not there are skipped.
func (m *SlotMigration) MoveKeys(tb testing.TB, keys ...string) {
	tb.Helper()
	if len(keys) > 0 {
		m.migrate(tb, keys)
		return
	}
	for {
		v, err := ctl(m.From.Addr(), m.c.password, "CLUSTER", "GETKEYSINSLOT", strconv.Itoa(m.Slot), "100")
		if err != nil {
			tb.Fatalf("redistest: CLUSTER GETKEYSINSLOT on %s: %v", m.From.Addr(), err)
		}
		list, _ := v.([]any)
		if len(list) == 0 {
			return
		}
		batch := make([]string, len(list))
		for i, k := range list {
			batch[i], _ = k.(string)
		}
		m.migrate(tb, batch)
	}
}

func (m *SlotMigration) migrate(tb testing.TB, keys []string) {
	tb.Helper()
	args := []string{"MIGRATE", "127.0.0.1", strconv.Itoa(m.To.Port()), "", "0", "5000"}
	if m.c.password != "" {
		args = append(args, "AUTH", m.c.password)
	}
	args = append(args, "REPLACE", "KEYS")
	args = append(args, keys...)
	v, err := ctl(m.From.Addr(), m.c.password, args...)
	if err != nil || (v != "OK" && v != "NOKEY") {
		tb.Fatalf("redistest: MIGRATE of %d keys from %s to %s: %v %v", len(keys), m.From.Addr(), m.To.Addr(), v, err)
	}
}

// Finish moves the remaining keys, assigns the slot to the target on the
// target, the source and every other running master, and waits until every
// running node agrees on the new owner.
func (m *SlotMigration) Finish(tb testing.TB) {
	tb.Helper()
	m.MoveKeys(tb)
	m.setslot(tb, m.To, "NODE", m.toID)
	m.setslot(tb, m.From, "NODE", m.toID)
	for _, s := range m.c.Masters(tb) {
		if s != m.To && s != m.From {
			m.setslot(tb, s, "NODE", m.toID)
		}
	}
	err := waitFor(syncTimeout, func() error {
		for _, s := range m.c.Nodes {
			if !s.answering() {
				continue
			}
			view, err := m.c.nodesView(s)
			if err != nil {
				return err
			}
			for _, n := range view {
				if n.role() == "master" && n.owns(m.Slot) && n.id != m.toID {
					return fmt.Errorf("node %s still sees slot %d on %s", s.Addr(), m.Slot, n.addr)
				}
				if n.flags["myself"] {
					for _, r := range n.slots {
						if strings.HasPrefix(r, "["+strconv.Itoa(m.Slot)+"-") {
							return fmt.Errorf("node %s still has %s", s.Addr(), r)
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("redistest: slot %d did not settle on %s: %v", m.Slot, m.To.Addr(), err)
	}
}
