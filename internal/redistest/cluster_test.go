package redistest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestClusterServesAllSlotsAndMigrates(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := StartCluster(t, 3, 1)
	t.Logf("3x2 cluster converged after %v", time.Since(start))

	masters, replicas := c.Masters(t), c.Replicas(t)
	if len(masters) != 3 || len(replicas) != 3 || len(c.Nodes) != 6 {
		t.Fatalf("%d masters, %d replicas of %d nodes; want 3, 3 of 6", len(masters), len(replicas), len(c.Nodes))
	}

	ctx := context.Background()
	rdb := c.Client(t)
	// Enough keys to land on every master.
	owners := map[*Server]int{}
	for i := 0; i < 200; i++ {
		key := "key:" + strconv.Itoa(i)
		if err := rdb.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		owners[c.MasterForSlot(t, KeySlot(key))]++
	}
	if len(owners) != 3 {
		t.Fatalf("200 keys landed on %d masters, want 3", len(owners))
	}
	for i := 0; i < 200; i++ {
		key := "key:" + strconv.Itoa(i)
		if got, err := rdb.Get(ctx, key).Int(); err != nil || got != i {
			t.Fatalf("GET %s = %d, %v", key, got, err)
		}
	}

	// KeySlot agrees with the server.
	for _, key := range []string{"a", "key:7", "{user1}.following", "foo{}{bar}", "{}x", ""} {
		if got, want := KeySlot(key), c.Nodes[0].Do(t, "CLUSTER", "KEYSLOT", key); int64(got) != want {
			t.Errorf("KeySlot(%q) = %d, server says %v", key, got, want)
		}
	}

	// Move the slot of a key with several keys in it to another master.
	key := "{moving}:a"
	slot := KeySlot(key)
	for _, k := range []string{key, "{moving}:b", "{moving}:c"} {
		if err := rdb.Set(ctx, k, "v-"+k, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	from := c.MasterForSlot(t, slot)
	var to *Server
	for _, m := range masters {
		if m != from {
			to = m
			break
		}
	}
	c.MigrateSlot(t, slot, to)
	if got := c.MasterForSlot(t, slot); got != to {
		t.Fatalf("slot %d is on %s after MigrateSlot, want %s", slot, got.Addr(), to.Addr())
	}
	if n := to.Do(t, "CLUSTER", "COUNTKEYSINSLOT", slot); n != int64(3) {
		t.Fatalf("target has %v keys in slot %d, want 3", n, slot)
	}
	if n := from.Do(t, "CLUSTER", "COUNTKEYSINSLOT", slot); n != int64(0) {
		t.Fatalf("source still has %v keys in slot %d", n, slot)
	}
	// The old owner now redirects with MOVED to the new one.
	_, err := ctl(from.Addr(), "", "GET", key)
	var re replyError
	if !errors.As(err, &re) || string(re) != fmt.Sprintf("MOVED %d %s", slot, to.Addr()) {
		t.Fatalf("GET on the old owner: %v, want MOVED %d %s", err, slot, to.Addr())
	}
	// The cluster client, whose slot map is stale, follows the redirect.
	for _, k := range []string{key, "{moving}:b", "{moving}:c"} {
		if got, err := rdb.Get(ctx, k).Result(); err != nil || got != "v-"+k {
			t.Fatalf("GET %s after migration = %q, %v", k, got, err)
		}
	}
}

func TestClusterMigrationInProgressAnswersASK(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3, 0, WithPassword("pw")) // also covers AUTH in redis-cli and MIGRATE
	ctx := context.Background()
	rdb := c.Client(t)
	keys := []string{"{ask}:1", "{ask}:2"}
	for _, k := range keys {
		if err := rdb.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slot := KeySlot(keys[0])
	from := c.MasterForSlot(t, slot)
	var to *Server
	for _, m := range c.Masters(t) {
		if m != from {
			to = m
		}
	}

	m := c.StartMigration(t, slot, to)
	m.MoveKeys(t, keys[0])
	// The moved key is answered with ASK by the source; the other is still
	// served there.
	_, err := ctl(from.Addr(), "pw", "GET", keys[0])
	var re replyError
	if !errors.As(err, &re) || string(re) != fmt.Sprintf("ASK %d %s", slot, to.Addr()) {
		t.Fatalf("GET of a moved key on the source: %v, want ASK", err)
	}
	if v, err := ctl(from.Addr(), "pw", "GET", keys[1]); err != nil || v != keys[1] {
		t.Fatalf("GET of a key not yet moved: %v, %v", v, err)
	}
	// go-redis follows ASK for both.
	for _, k := range keys {
		if got, err := rdb.Get(ctx, k).Result(); err != nil || got != k {
			t.Fatalf("GET %s during migration = %q, %v", k, got, err)
		}
	}
	m.Finish(t)
	if got := c.MasterForSlot(t, slot); got != to {
		t.Fatalf("slot on %s after Finish, want %s", got.Addr(), to.Addr())
	}
	for _, k := range keys {
		if got, err := rdb.Get(ctx, k).Result(); err != nil || got != k {
			t.Fatalf("GET %s after Finish = %q, %v", k, got, err)
		}
	}
	if err := rdb.Get(ctx, "{ask}:none").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET of a missing key: %v, want redis.Nil", err)
	}
}
