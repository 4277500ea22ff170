//go:build linux

package dlock_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/chaos"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestChaosSentinelFailover measures mutual exclusion across real Sentinel
// failovers, without and with acknowledgement from every replica. Each
// trial starts a master with two replicas and three Sentinels; a client
// takes a lock through a failover client and the master is killed (kill
// -9) right after the grant; once Sentinel has promoted a replica, a second
// client tries the lock on the new master while the first still holds its
// lease (TTL 30 s). The lock is broken when the second gets it.
// TestChaosFailover promotes by hand, at once or after 200 ms, and holds
// the replication stream back; this one lets Sentinel pick the replica and
// take the time it takes (down-after-milliseconds 1000).
//
// A failover takes Sentinel 2-4 s, so only the long tier (DLOCK_CHAOS=long)
// runs it; the short tier's failovers are TestChaosFailover's (with
// acknowledgement, asserting no lock granted twice) and
// TestSentinelFailover's.
func TestChaosSentinelFailover(t *testing.T) {
	if !chaos.Long() {
		t.Skip("long tier only (DLOCK_CHAOS=long): each trial waits 2-4 s for Sentinel")
	}
	started := time.Now()
	seed := chaos.Seed(t)
	r := chaos.Rand(seed)
	var rows [][]string
	for _, ack := range []int{0, 2} {
		var rec chaos.Recorder
		n := map[failoverOutcome]int{}
		trials := chaos.Pick(1, 50)
		var promotion chaos.Durations
		for i := 0; i < trials; i++ {
			t.Run(fmt.Sprintf("ack%d-%d", ack, i), func(t *testing.T) {
				out, took := runSentinelTrial(t, &rec, fmt.Sprintf("%s-ack%d-%d-%d", t.Name(), ack, i, r.Int63()), ack)
				n[out]++
				if took > 0 {
					promotion.Add(took)
				}
			})
		}
		overlaps := chaos.Overlaps(rec.History(), 1, 0)
		if len(overlaps) != n[failoverLost] {
			t.Errorf("ack %d: %d locks granted twice but %d overlapping holds", ack, n[failoverLost], len(overlaps))
		}
		if ack > 0 {
			expectNone(t, fmt.Sprintf("Sentinel failover with acknowledgement from %d replicas", ack), overlaps)
		}
		mode := "none"
		if ack > 0 {
			mode = fmt.Sprintf("from both replicas (`WithReplicaAck(%d, 300ms)`)", ack)
		}
		ran := n[failoverLost] + n[failoverSurvived] + n[failoverRefused]
		if ran == 0 {
			continue // filtered out by -run
		}
		rows = append(rows, []string{mode, strconv.Itoa(ran),
			fmt.Sprintf("%d (%.0f%%)", n[failoverLost], 100*float64(n[failoverLost])/float64(ran)),
			strconv.Itoa(n[failoverRefused]), promotion.Summary()})
	}
	s := chaos.NewSection("sentinel-failover")
	s.Printf("%s", seedLine(t, seed, started))
	s.Table([]string{"replica acknowledgement", "failovers", "locks granted twice", "grants refused (ErrReplicaAck)", "kill to promotion"}, rows)
	s.Printf("\nEach trial: a master with two replicas and three Sentinels (down-after-milliseconds 1000), TryLock through a failover client, kill -9 of the master right after the grant, Sentinel's promotion of a replica, TryLock by another client on the new master while the first still holds its lease (TTL 30 s).\n")
	publish(t, s)
}

// runSentinelTrial is one trial of TestChaosSentinelFailover. It returns
// the outcome and how long Sentinel took to promote a replica (0 when no
// grant was made).
func runSentinelTrial(t *testing.T, rec *chaos.Recorder, name string, ack int) (failoverOutcome, time.Duration) {
	ctx := testCtx(t)
	g := redistest.StartSentinel(t, 2)
	opts := []dlock.Option{dlock.WithTTL(30 * time.Second), dlock.WithOwnerInfo("a")}
	if ack > 0 {
		opts = append(opts, dlock.WithReplicaAck(ack, 300*time.Millisecond))
	}
	a := failoverClient(t, g, opts...)
	t0 := chaos.Now()
	lease, err := a.Mutex(name).TryLock(ctx)
	e := chaos.Event{Kind: chaos.Acquire, T0: t0, T: chaos.Now(), Proc: "a", Lock: name, Hold: name + "/a"}
	switch {
	case err == nil:
		e.OK, e.Token, e.Owner = true, lease.Token(), dlock.LeaseOwner(lease)
	case ack > 0 && errors.Is(err, dlock.ErrReplicaAck):
		e.Err = errClass(err)
		rec.Add(e)
		return failoverRefused, 0
	default:
		t.Fatalf("TryLock on the master: %v", err)
	}
	rec.Add(e)
	old := g.Master
	old.Kill()
	killed := time.Now()
	rec.Add(chaos.Event{Kind: chaos.Fault, Note: "kill master", Lock: name})
	g.WaitForFailover(t, old, 30*time.Second)
	took := time.Since(killed)
	rec.Add(chaos.Event{Kind: chaos.Fault, Note: "promoted by Sentinel", Lock: name})

	// The failover client's first attempt may still reach the dead master.
	b := failoverClient(t, g, dlock.WithOwnerInfo("b"))
	var other *dlock.Lease
	out := failoverLost
	deadline := time.Now().Add(10 * time.Second)
	for {
		t0 = chaos.Now()
		other, err = b.Mutex(name).TryLock(ctx)
		if err == nil || errors.Is(err, dlock.ErrNotObtained) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	e = chaos.Event{Kind: chaos.Acquire, T0: t0, T: chaos.Now(), Proc: "b", Lock: name, Hold: name + "/b"}
	switch {
	case err == nil:
		e.OK, e.Token, e.Owner = true, other.Token(), dlock.LeaseOwner(other)
	case errors.Is(err, dlock.ErrNotObtained):
		e.Err = errClass(err)
		out = failoverSurvived
	default:
		t.Fatalf("TryLock on the new master: %v", err)
	}
	rec.Add(e)
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
	return out, took
}
