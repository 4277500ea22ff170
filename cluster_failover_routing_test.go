package dlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestClusterFailoverRouting kills the master of two held locks and waits
// for its replica's promotion. go-redis keeps sending a slot's commands to
// the master its slot map names, and reloads that map after MOVED or
// READONLY, or once it is 10 s old, but not after a connection refused: the
// driver must reload it itself. Two clients of their own (each with its own
// slot map, loaded when it took its lock, just before the kill): an Unlock
// begun at the promotion must succeed, and the renewals of a lease with a
// 10 s TTL must reach the new master within a few seconds of the
// promotion, rather than when go-redis's map turns 10 s old.
func TestClusterFailoverRouting(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	ctx := testCtx(t)
	base := uniqueName(t)
	name := base + "unlock"
	slot := redistest.KeySlot(lockKey(name))
	master := cl.MasterForSlot(t, slot)
	replica := replicaOf(t, cl, master)
	kept := ""
	for i := 0; kept == ""; i++ {
		if i > 200 {
			t.Fatalf("no second name on %s among 200", master.Addr())
		}
		if n := fmt.Sprintf("%skept%d", base, i); cl.MasterForSlot(t, redistest.KeySlot(lockKey(n))) == master {
			kept = n
		}
	}

	// a's lease is not renewed before the end (every 20 s): only its
	// Unlock meets the failover.
	a := clusterClient(t, cl)
	held := mustLock(t, a, name, dlock.WithTTL(time.Minute))
	const ttl = 10 * time.Second // renewed every 3.3 s, retried every 500 ms
	b := clusterClient(t, cl)
	renewed := mustLock(t, b, kept, dlock.WithTTL(ttl))
	waitReplicated(t, master, replica)

	master.Kill()
	killed := time.Now()
	waitFor(t, 30*time.Second, func() bool { return failedOver(t, cl, replica) }, "the replica's promotion")
	promoted := time.Now()
	t.Logf("replica %s promoted %v after the kill", replica.Addr(), promoted.Sub(killed).Round(time.Millisecond))

	// a's Unlock and b's renewals, concurrently from the promotion on.
	type result struct {
		err  error
		took time.Duration
	}
	unlocked := make(chan result, 1)
	go func() {
		uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := held.Unlock(uctx)
		unlocked <- result{err, time.Since(promoted)}
	}()
	// A renewal sent after the promotion succeeded: validity is its start
	// + 10 s - drift (10000/100 + 2 ms). go-redis alone would not send one
	// there before its slot map, loaded when b took its lock, is 10 s old:
	// about 6 s after the promotion.
	for !dlock.LeaseValidUntil(renewed).After(promoted.Add(ttl - 200*time.Millisecond)) {
		if err := renewed.Err(); err != nil {
			t.Errorf("the lease on the failed master was lost: %v", err)
			break
		}
		if time.Since(promoted) > 5*time.Second {
			t.Errorf("no renewal on the new master within 5s of the promotion")
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("renewed on the new master (or gave up) %v after the promotion", time.Since(promoted).Round(time.Millisecond))

	// The Unlock's first sending may spend go-redis's own retries on the
	// dead address (MaxRetries 3 times 5 dials 100 ms apart: about 2 s)
	// before the driver reloads the slot map and sends it again.
	r := <-unlocked
	if r.err != nil {
		t.Fatalf("Unlock %v after the promotion: %v", r.took.Round(time.Millisecond), r.err)
	}
	t.Logf("Unlock succeeded %v after the promotion", r.took.Round(time.Millisecond))
	if r.took > 7*time.Second {
		t.Errorf("Unlock took until %v after the promotion", r.took.Round(time.Millisecond))
	}
	if n, _ := replica.Do(t, "EXISTS", lockKey(name)).(int64); n != 0 {
		t.Errorf("the new master still has the released lock's key")
	}
	if err := renewed.Unlock(ctx); err != nil {
		t.Errorf("Unlock of the renewed lease: %v", err)
	}
}

// waitReplicated waits until replica has received everything master wrote.
func waitReplicated(t *testing.T, master, replica *redistest.Server) {
	t.Helper()
	offset := func(s *redistest.Server, field string) string {
		info, _ := s.Do(t, "INFO", "replication").(string)
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				return v
			}
		}
		return ""
	}
	want := offset(master, "master_repl_offset")
	waitFor(t, 10*time.Second, func() bool { return offset(replica, "slave_repl_offset") == want },
		"the replica to reach the master's offset "+want)
}

// failedOver reports whether replica calls itself a master and every node
// that answers reports cluster_state:ok.
func failedOver(t *testing.T, cl *redistest.Cluster, replica *redistest.Server) bool {
	t.Helper()
	if role, _ := replica.Do(t, "ROLE").([]any); len(role) == 0 || role[0] != "master" {
		return false
	}
	for _, s := range cl.Nodes {
		if !s.Running() {
			continue
		}
		if info, _ := s.Do(t, "CLUSTER", "INFO").(string); !strings.Contains(info, "cluster_state:ok\r\n") {
			return false
		}
	}
	return true
}
