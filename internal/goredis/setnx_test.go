package goredis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
)

// acquireScript stands for the script SetNX goes before; SetNX never sends
// it, so its body does not matter.
var acquireScript = driver.NewScript("return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])")

// TestSetNX: a free key is taken with one native SET (no script runs) and
// the call settled as granted; an existing key, another call in flight,
// and a Cluster leave the call to its script; a refusal and a transport
// failure settle the call with the error.
func TestSetNX(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	d := New(rdb)
	defer d.Close()
	ctx := context.Background()
	key := redistest.UniqueName(t)
	newCall := func() *driver.Call {
		return &driver.Call{Script: acquireScript, Keys: []string{key}, Args: []any{"me", int64(30000)}}
	}

	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	c := newCall()
	if !d.SetNX(ctx, c, key, "me", 30*time.Second) {
		t.Fatal("a free key: SetNX did not settle the call")
	}
	if c.Err != nil || c.Reply != int64(1) || c.Resent {
		t.Fatalf("a free key: Reply %#v, Err %v, Resent %v; want 1, nil, false", c.Reply, c.Err, c.Resent)
	}
	if v := rdb.Get(ctx, key).Val(); v != "me" {
		t.Errorf("the key holds %q, want me", v)
	}
	if pttl := rdb.PTTL(ctx, key).Val(); pttl <= 25*time.Second || pttl > 30*time.Second {
		t.Errorf("the key's PTTL is %v, want about 30s", pttl)
	}
	stats := rdb.Info(ctx, "commandstats").Val()
	if !strings.Contains(stats, "cmdstat_set:calls=1,") || strings.Contains(stats, "cmdstat_eval") {
		t.Errorf("want one SET and no script run; commandstats:\n%s", stats)
	}

	// The key exists (ours, from an earlier sending, or another's): the
	// script decides, and SetNX changes nothing.
	c = newCall()
	if d.SetNX(ctx, c, key, "other", 10*time.Second) {
		t.Errorf("an existing key: SetNX settled the call (Reply %#v, Err %v)", c.Reply, c.Err)
	}
	if v := rdb.Get(ctx, key).Val(); v != "me" {
		t.Errorf("the key holds %q after SetNX on it, want me", v)
	}

	// Another call in flight: the call goes to the shared pipeline instead.
	free := key + ":free"
	if !d.kit.TryAlone() {
		t.Fatal("TryAlone with nothing in flight failed")
	}
	settled := d.SetNX(ctx, newCall(), free, "me", 30*time.Second)
	d.kit.EndAlone()
	if settled {
		t.Error("with a call in flight: SetNX settled the call")
	}
	if n := rdb.Exists(ctx, free).Val(); n != 0 {
		t.Error("with a call in flight: SetNX wrote the key")
	}
	if n := d.kit.InFlight(); n != 0 {
		t.Errorf("%d calls in flight after SetNX, want 0", n)
	}

	// Refused (out of memory): settled with the server's error.
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	c = newCall()
	settled = d.SetNX(ctx, c, free, "me", 30*time.Second)
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	var rerr *driver.ReplyError
	if !settled || !errors.As(c.Err, &rerr) || !strings.HasPrefix(rerr.Msg, "OOM") {
		t.Errorf("refused: settled %v, Err %v; want settled with an OOM reply error", settled, c.Err)
	}

	// The server gone: settled with the transport error.
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	dd := New(down)
	defer dd.Close()
	c = newCall()
	if !dd.SetNX(ctx, c, key, "me", 30*time.Second) || c.Err == nil || errors.As(c.Err, &rerr) {
		t.Errorf("no server: Err %v; want settled with a transport error", c.Err)
	}
}

// TestSetNXLeavesClusterToScripts: on a Cluster the call keeps the script
// path, whose failover handling SetNX does not have; SetNX sends nothing.
func TestSetNXLeavesClusterToScripts(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRetries: -1})
	t.Cleanup(func() { _ = cc.Close() })
	d := New(cc)
	defer d.Close()
	c := &driver.Call{Script: acquireScript, Keys: []string{"k"}, Args: []any{"me", int64(30000)}}
	if d.SetNX(context.Background(), c, "k", "me", 30*time.Second) {
		t.Errorf("a Cluster driver: SetNX settled the call (Reply %#v, Err %v)", c.Reply, c.Err)
	}
	if c.Reply != nil || c.Err != nil {
		t.Errorf("a Cluster driver: the call has Reply %#v, Err %v; want it untouched", c.Reply, c.Err)
	}
}
