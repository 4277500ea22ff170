package main

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

func TestResolveSentinelAndCluster(t *testing.T) {
	env := map[string]string{redisPasswordEnv: "envpw", redisSentinelPasswordEnv: "sentinelpw"}
	getenv := func(k string) string { return env[k] }

	o := connOptions{url: "redis+sentinel://:pw@s1:26379,s2,[::1]:26380/mymaster/2?dial_timeout=3s", getenv: getenv}
	tg, err := o.resolve()
	if err != nil {
		t.Fatalf("sentinel: %v", err)
	}
	f := tg.failover
	if f == nil || f.MasterName != "mymaster" || f.DB != 2 || f.Password != "pw" || f.SentinelPassword != "sentinelpw" ||
		!slices.Equal(f.SentinelAddrs, []string{"s1:26379", "s2:26379", "[::1]:26380"}) || f.DialTimeout != 3*time.Second || f.TLSConfig != nil {
		t.Errorf("sentinel options %+v", f)
	}
	if strings.Contains(tg.desc, "pw@") || !strings.Contains(tg.desc, "Redis Sentinel master at redis+sentinel://") {
		t.Errorf("desc %q", tg.desc)
	}

	o = connOptions{url: "rediss+sentinel://s1/m", getenv: getenv}
	if tg, err = o.resolve(); err != nil || tg.failover.Password != "envpw" || tg.failover.TLSConfig == nil || tg.failover.TLSConfig.ServerName != "" {
		t.Errorf("rediss+sentinel: %+v, %v; want the password from the environment and TLS verifying each server by its address", tg, err)
	}

	o = connOptions{url: "rediss+cluster://u:pw@n1:7000,n2:7001?addr=n3:7002&read_timeout=2s", getenv: getenv}
	if tg, err = o.resolve(); err != nil {
		t.Fatalf("cluster: %v", err)
	}
	c := tg.cluster
	if c == nil || c.Username != "u" || c.Password != "pw" || !slices.Equal(c.Addrs, []string{"n1:7000", "n2:7001", "n3:7002"}) ||
		c.ReadTimeout != 2*time.Second || c.TLSConfig == nil || c.TLSConfig.ServerName != "" {
		t.Errorf("cluster options %+v", c)
	}
	o = connOptions{url: "redis+cluster://n1", getenv: getenv}
	if tg, err = o.resolve(); err != nil || tg.cluster.Password != "envpw" || !slices.Equal(tg.cluster.Addrs, []string{"n1:6379"}) {
		t.Errorf("redis+cluster://n1: %+v, %v", tg, err)
	}
}

func TestDeploymentURLErrors(t *testing.T) {
	tests := []struct{ url, want string }{
		{"redis+sentinel://s1:26379", "give the name of the master"},
		{"redis+sentinel://s1/m/2/3", "give the name of the master"},
		{"redis+sentinel://s1,,s2/m", "empty address"},
		{"redis+sentinel://s1/m?bogus=1", "unexpected option"},
		{"redis+cluster://n1/3", "a Cluster URL has no path"},
		{"redis+cluster://n1?bogus=1", "unexpected option"},
		{"redis+cluster://:s3cret@n1?bogus=1", "redis+cluster://:xxxxx@n1"},
		{"memcached://h", `unsupported scheme "memcached"`},
	}
	for _, tt := range tests {
		r := runCLI(t, map[string]string{redisURLEnv: tt.url}, "ls")
		if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) || strings.Contains(r.stderr, "s3cret") {
			t.Errorf("REDIS_URL=%s dlock ls: exit %d, stderr %q; want %d and %q", tt.url, r.code, r.stderr, exitUsage, tt.want)
		}
	}
}

// TestClusterURL runs, lists and releases locks on a Redis Cluster given as
// redis+cluster://, with names on every master.
func TestClusterURL(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	env := map[string]string{redisURLEnv: "redis+cluster://" + strings.Join(cl.Addrs(), ",")}
	names := []string{"job:1", "job:2", "job:3", "job:4", "job:5", "{cart:7}:items"}
	for _, name := range names {
		r := runCLI(t, env, "run", name, "--", "sh", "-c", "echo token=$DLOCK_TOKEN")
		if r.code != exitOK || !regexp.MustCompile(`token=[1-9][0-9]+`).MatchString(r.stdout) {
			t.Fatalf("run %s on the cluster: exit %d\n%s%s", name, r.code, r.stdout, r.stderr)
		}
	}
	r := runCLI(t, env, "ls", "--all", "--json")
	for _, name := range names {
		if !strings.Contains(r.stdout, `"name": "`+name+`"`) {
			t.Errorf("ls on the cluster does not list %q", name)
		}
	}
	r = runCLI(t, env, "status", "job:1")
	if r.code != exitOK || !strings.Contains(r.stdout, `"job:1" mutex: free, 0 waiting, last token`) {
		t.Errorf("status on the cluster: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, env, "unlock", "--force", "job:1"); r.code != exitOK || !strings.Contains(r.stdout, "nothing was held") {
		t.Errorf("unlock on the cluster: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, env, "demo", "--items", "5", "--workers", "2"); r.code != exitOK {
		t.Errorf("demo on the cluster: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestSentinelURL runs a command under a lock on the master that Sentinels
// monitor, given as redis+sentinel://.
func TestSentinelURL(t *testing.T) {
	g := redistest.StartSentinel(t, 0, redistest.WithPassword("s3cret"))
	env := map[string]string{
		redisURLEnv:      "redis+sentinel://" + strings.Join(g.SentinelAddrs(), ",") + "/" + g.MasterName,
		redisPasswordEnv: "s3cret",
	}
	r := runCLI(t, env, "run", "sentinel-job", "--", "sh", "-c", "echo ran with token $DLOCK_TOKEN")
	if r.code != exitOK || !strings.Contains(r.stdout, "ran with token") {
		t.Fatalf("run through the Sentinels: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, env, "status", "sentinel-job")
	if r.code != exitOK || !strings.Contains(r.stdout, `"sentinel-job" mutex: free`) {
		t.Errorf("status through the Sentinels: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if v := g.Master.Do(t, "EXISTS", "dlock:{sentinel-job}:fence"); v != int64(1) {
		t.Errorf("the lock was not taken on the master: EXISTS = %v", v)
	}

	// A master name no Sentinel monitors: go-redis calls the Sentinels
	// unreachable ("redis: nil"); dlock says what is wrong.
	env[redisURLEnv] = "redis+sentinel://" + strings.Join(g.SentinelAddrs(), ",") + "/no-such-master"
	r = runCLI(t, env, "status", "sentinel-job")
	if r.code != exitFailure || !strings.Contains(r.stderr, `none monitors a master called "no-such-master"`) {
		t.Errorf("status through the Sentinels with a wrong master name: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// rediss:// against a server that speaks plain text: the handshake gets no
// answer, so the probe ends at its deadline, and the message says what to
// change rather than only that the deadline passed.
func TestPingTLSToPlainTextServerSaysWhy(t *testing.T) {
	srv := redistest.Shared(t)
	getenv := func(string) string { return srv.Password() }
	for _, u := range []string{"rediss://" + srv.Addr(), "rediss+cluster://" + srv.Addr()} {
		o := connOptions{url: u, getenv: getenv}
		tg, err := o.resolve()
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err = tg.ping(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "if the server speaks plain text, use redis://") {
			t.Errorf("%s against a plain-text server: got %v, want the TLS hint", u, err)
		}
	}
	// The hint is for TLS only: a plain URL that times out gets the usual one.
	o := connOptions{url: "redis://" + srv.Addr(), getenv: getenv}
	tg, err := o.resolve()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tg.ping(ctx); err == nil || strings.Contains(err.Error(), "TLS") {
		t.Errorf("redis:// with its context done: got %v, want an error without the TLS hint", err)
	}
}
