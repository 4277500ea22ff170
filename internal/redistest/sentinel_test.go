package redistest

import (
	"context"
	"testing"
	"time"
)

func TestSentinelFailoverPromotesAReplica(t *testing.T) {
	t.Parallel()
	start := time.Now()
	g := StartSentinel(t, 2, WithPassword("pw")) // sentinels need auth-pass
	t.Logf("sentinel group ready after %v", time.Since(start))
	if len(g.Sentinels) != 3 || len(g.SentinelAddrs()) != 3 {
		t.Fatalf("%d sentinels, want 3", len(g.Sentinels))
	}
	if m := g.CurrentMaster(t); m != g.Master {
		t.Fatalf("CurrentMaster = %s, want %s", m.Addr(), g.Master.Addr())
	}

	ctx := context.Background()
	rdb := g.FailoverClient(t)
	if err := rdb.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	g.Master.Do(t, "WAIT", "2", "5000")

	old := g.Master
	old.Kill()
	start = time.Now()
	promoted := g.WaitForFailover(t, old, 20*time.Second)
	t.Logf("failover to %s after %v", promoted.Addr(), time.Since(start))
	if promoted == old {
		t.Fatal("WaitForFailover returned the old master")
	}
	if promoted != g.Replicas[0] && promoted != g.Replicas[1] {
		t.Fatalf("promoted %s is not one of the replicas", promoted.Addr())
	}
	if m := g.CurrentMaster(t); m != promoted {
		t.Fatalf("CurrentMaster = %s, want %s", m.Addr(), promoted.Addr())
	}

	// The failover client follows the sentinels to the new master; its
	// first attempt may still hit the dead one.
	err := waitFor(10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return rdb.Set(ctx, "after", "2", 0).Err()
	})
	if err != nil {
		t.Fatalf("SET through the failover client after failover: %v", err)
	}
	if got := promoted.Do(t, "GET", "after"); got != "2" {
		t.Fatalf("new master: GET after = %v", got)
	}
	if got := promoted.Do(t, "GET", "before"); got != "1" {
		t.Fatalf("new master lost a replicated write: GET before = %v", got)
	}
}
