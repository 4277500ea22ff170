//go:build linux

package dlock_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/chaos"
	"github.com/dlock-go/dlock/internal/redistest"
)

// failoverPair is a master and one replica that follows it through a proxy,
// so that the replication stream can be held back.
type failoverPair struct {
	master, replica *redistest.Server
	link            *redistest.Proxy // replica -> master
}

func startFailoverPair(t *testing.T) *failoverPair {
	master := redistest.Start(t)
	link := redistest.StartProxy(t, master.Addr())
	_, port, _ := strings.Cut(link.Addr(), ":")
	replica := redistest.Start(t, redistest.WithArgs("--replicaof", "127.0.0.1", port, "--replica-announce-ip", "127.0.0.1"))
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, _ := replica.Do(t, "INFO", "replication").(string)
		if strings.Contains(info, "master_link_status:up") && strings.Contains(info, "master_sync_in_progress:0") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica of %s not in sync: %s", master.Addr(), info)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A write the replica acknowledged: the stream flows end to end.
	if n, _ := master.Do(t, "WAIT", "1", "5000").(int64); n != 1 {
		t.Fatalf("the replica did not acknowledge a write")
	}
	return &failoverPair{master: master, replica: replica, link: link}
}

// runFailoverTrial takes a lock on the master, kills the master with
// SIGKILL right after the grant (the stream to the replica held back when
// stall is set), promotes the replica after detect (Sentinel needs at least
// its down-after-milliseconds, usually seconds, to notice), and lets
// another client try the lock on the new master while the first still
// holds its lease. It records both in rec and reports whether the lock
// survived the failover.
func runFailoverTrial(t *testing.T, rec *chaos.Recorder, name string, stall bool, detect time.Duration) (survived bool) {
	t.Helper()
	ctx := testCtx(t)
	pair := startFailoverPair(t)
	a := newClient(t, pair.master, dlock.WithTTL(10*time.Second), dlock.WithOwnerInfo("a"))
	if stall {
		pair.link.HoldReplies(true) // the master's stream to the replica waits
	}
	t0 := chaos.Now()
	lease, err := a.Mutex(name).TryLock(ctx)
	e := chaos.Event{Kind: chaos.Acquire, T0: t0, T: chaos.Now(), Proc: "a", Lock: name, Hold: name + "/a"}
	if err != nil {
		t.Fatalf("%s: TryLock on the master: %v", name, err)
	}
	e.OK, e.Token, e.Owner = true, lease.Token(), dlock.LeaseOwner(lease)
	rec.Add(e)
	pair.master.Kill()
	rec.Add(chaos.Event{Kind: chaos.Fault, Note: "kill master", Lock: name})
	time.Sleep(detect)
	pair.replica.Do(t, "REPLICAOF", "NO", "ONE")
	rec.Add(chaos.Event{Kind: chaos.Fault, Note: "promote replica", Lock: name})

	b := newClient(t, pair.replica, dlock.WithOwnerInfo("b"))
	t0 = chaos.Now()
	other, err := b.Mutex(name).TryLock(ctx)
	e = chaos.Event{Kind: chaos.Acquire, T0: t0, T: chaos.Now(), Proc: "b", Lock: name, Hold: name + "/b"}
	switch {
	case err == nil:
		e.OK, e.Token, e.Owner = true, other.Token(), dlock.LeaseOwner(other)
	case errors.Is(err, dlock.ErrNotObtained):
		e.Err = errClass(err)
		survived = true
	default:
		t.Fatalf("%s: TryLock on the promoted replica: %v", name, err)
	}
	rec.Add(e)
	// What a still believes, now that b has tried.
	s := chaos.Now()
	select {
	case <-lease.Done():
	default:
		rec.Add(chaos.Event{Kind: chaos.Held, T: s, Proc: "a", Hold: name + "/a"})
	}
	if other != nil {
		rec.Add(chaos.Event{Kind: chaos.Held, T: chaos.Now(), Proc: "b", Hold: name + "/b"})
		_ = other.Unlock(ctx)
	}
	_ = a.Close() // its master is gone: the lease just ends
	return survived
}

// TestChaosFailover measures what asynchronous replication costs a lock:
// the master grants a lock and dies, and the promoted replica may not know
// it, so another client gets it too. Without the replica-acknowledgement
// option (WithReplicaAck, issue 4: not in the library yet) this is
// measured, not asserted: with a healthy replication link on loopback, and
// with the stream to the replica held back (a lagging or partitioned
// replica), which loses every grant made meanwhile.
func TestChaosFailover(t *testing.T) {
	started := time.Now()
	seed := chaos.Seed(t)
	var rows [][]string
	for _, c := range []struct {
		link   string
		stall  bool
		detect time.Duration
		trials int
	}{
		{"healthy (loopback), promoted 200 ms after the kill", false, 200 * time.Millisecond, chaos.Pick(3, 100)},
		{"healthy (loopback), promoted at once", false, 0, chaos.Pick(3, 100)},
		{"held back (lagging or partitioned replica), promoted 200 ms after the kill", true, 200 * time.Millisecond, chaos.Pick(2, 20)},
	} {
		var rec chaos.Recorder
		lost := 0
		for i := 0; i < c.trials; i++ {
			if !runFailoverTrial(t, &rec, fmt.Sprintf("%s-%v-%v-%d", t.Name(), c.stall, c.detect > 0, i), c.stall, c.detect) {
				lost++
			}
		}
		overlaps := chaos.Overlaps(rec.History(), 1, 0)
		if len(overlaps) != lost {
			t.Errorf("%s: %d locks lost in the failover but %d overlapping holds", c.link, lost, len(overlaps))
		}
		if c.stall && lost != c.trials {
			// The held stream cannot have carried the grant: if the lock
			// survived, the harness did not hold it back.
			t.Errorf("with the replication stream held back, %d of %d locks survived the failover", c.trials-lost, c.trials)
		}
		rows = append(rows, []string{c.link, strconv.Itoa(c.trials), fmt.Sprintf("%d (%.0f%%)", lost, 100*float64(lost)/float64(c.trials)), "not available yet (issue 4)"})
	}
	s := chaos.NewSection("failover")
	s.Printf("%s", seedLine(t, seed, started))
	s.Table([]string{"replication link, promotion", "failovers", "locks granted twice, without replica ack", "with ack from all replicas"}, rows)
	s.Printf("\nEach trial: TryLock on the master, kill -9 of the master right after the grant, REPLICAOF NO ONE on the replica (what Sentinel does once it notices, which takes at least its down-after-milliseconds), TryLock by another client on the new master while the first still holds its lease (TTL 10 s). The replica follows the master through a proxy, one more hop than a direct link. Promoted at once, the grant is lost whenever it is still in flight to the replica: an upper bound no real failover reaches, which shows that the window exists.\n")
	publish(t, s)
}

// TestChaosFailoverWithReplicaAck is the place for the failover scenario
// with replica acknowledgement (issue 4), and for its mutant: a grant
// accepted whatever WAIT answered ("ignore-replica-acks" in chaosMutants),
// which the overlap check must catch.
func TestChaosFailoverWithReplicaAck(t *testing.T) {
	t.Skip("replica acknowledgement (issue 4) has not landed: see chaosMutants and docs/reliability.md")
}
