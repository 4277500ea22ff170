package redistest

import (
	"context"
	"testing"
	"time"
)

func TestReplicationPropagatesWrites(t *testing.T) {
	t.Parallel()
	start := time.Now()
	r := StartReplicated(t, 2, WithPassword("pw"))
	t.Logf("master and 2 replicas in sync after %v", time.Since(start))
	if len(r.Replicas) != 2 {
		t.Fatalf("%d replicas, want 2", len(r.Replicas))
	}
	ctx := context.Background()
	if err := r.Master.Client(t).Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// WAIT makes the test independent of replication lag, and must not
	// take long: StartReplicated promises a stream that already flows.
	start = time.Now()
	if n := r.Master.Do(t, "WAIT", "2", "5000"); n != int64(2) {
		t.Fatalf("WAIT 2 = %v", n)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("the first write took %v to reach both replicas", d)
	}
	for _, rep := range r.Replicas {
		if got := rep.Do(t, "GET", "k"); got != "v" {
			t.Errorf("replica %s: GET k = %v, want v", rep.Addr(), got)
		}
		if role := rep.Do(t, "ROLE").([]any)[0]; role != "slave" {
			t.Errorf("replica %s has role %v", rep.Addr(), role)
		}
	}
}
