package main

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestHeldForShown checks that ls, status (table and --json) and top show
// how long a holder has held the lock once a renewal recorded it.
func TestHeldForShown(t *testing.T) {
	srv := redistest.Shared(t)
	name := uniqueLockName(t)
	c, err := dlock.New(srv.Client(t), dlock.WithTTL(2*time.Second), dlock.WithOwnerInfo("holder"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	since := time.Now()
	l, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	waitUntil(t, "a hold whose start a renewal recorded", func() bool {
		infos, err := c.Inspect(ctx, name)
		return err == nil && len(infos) == 1 && len(infos[0].Holders) == 1 && infos[0].Holders[0].HeldFor > 0
	})

	env := map[string]string{redisURLEnv: srv.URL()}
	r := runCLI(t, env, "status", "--json", name)
	var locks []lockJSON
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &locks) != nil || len(locks) != 1 || len(locks[0].Holders) != 1 {
		t.Fatalf("status --json: exit %d, want one holder:\n%s%s", r.code, r.stdout, r.stderr)
	}
	held := time.Duration(locks[0].Holders[0].HeldForMillis) * time.Millisecond
	if limit := time.Since(since) + 10*time.Millisecond; held < 500*time.Millisecond || held > limit {
		t.Errorf("status --json: held_for_ms %v, want between a quarter of the TTL and %v", held, limit)
	}

	timeCol := `[0-9.]+(ms|s|m[0-9]*s?)`
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status", name}, `(?m)^ +holder +\S+ +holder +\d+ +` + timeCol + ` +` + timeCol + `$`},
		{[]string{"ls", name}, `(?m)^` + regexp.QuoteMeta(name) + ` +mutex +holder +` + timeCol + ` +0 +- +` + timeCol + ` +\d+$`},
		{[]string{"top", "--once", name}, `(?m)^mutex +` + regexp.QuoteMeta(name) + ` +holder +` + timeCol + ` +` + timeCol + ` +0 +- +-$`},
	} {
		r := runCLI(t, env, c.args...)
		if r.code != exitOK || !regexp.MustCompile(c.want).MatchString(r.stdout) {
			t.Errorf("%v: exit %d, output does not match %s:\n%s%s", c.args, r.code, c.want, r.stdout, r.stderr)
		}
	}
}
