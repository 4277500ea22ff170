package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestLsHeldKeepsLatches checks that ls lists a latch that is still
// counting down (its waiters wait for it), and leaves out a mutex that was
// released unless --all asks for it.
func TestLsHeldKeepsLatches(t *testing.T) {
	srv := redistest.Shared(t)
	c, err := dlock.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	prefix := fmt.Sprintf("lsheld-%d-", time.Now().UnixNano())
	if ok, err := c.Latch(prefix+"latch").TrySetCount(ctx, 2); !ok || err != nil {
		t.Fatalf("TrySetCount = %v, %v", ok, err)
	}
	l, err := c.Mutex(prefix + "free").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	env := map[string]string{redisURLEnv: srv.URL()}
	r := runCLI(t, env, "ls", "--all", prefix+"*")
	if r.code != exitOK || !strings.Contains(r.stdout, prefix+"latch ") || !strings.Contains(r.stdout, prefix+"free ") {
		t.Fatalf("ls --all: exit %d, want both locks listed:\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, env, "ls", prefix+"*")
	if r.code != exitOK || !strings.Contains(r.stdout, prefix+"latch ") || strings.Contains(r.stdout, prefix+"free") {
		t.Errorf("ls: exit %d, want the latch and not the free mutex:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "count 2") {
		t.Errorf("ls --held does not show the latch's count:\n%s", r.stdout)
	}
}
