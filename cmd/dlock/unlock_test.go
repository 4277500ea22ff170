package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestUnlockOwner releases one reader of a read-write lock with --owner,
// by its whole id and then by the short one "dlock status" shows: the
// other reader keeps the lock, and releasing the last hands it to the
// waiting writer.
func TestUnlockOwner(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := context.Background()
	name := uniqueLockName(t)
	var readers []*dlock.Lease
	for _, info := range []string{"reader-1", "reader-2"} {
		c, err := dlock.New(srv.Client(t), dlock.WithOwnerInfo(info), dlock.WithTTL(600*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r, err := c.RWMutex(name).RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	w, err := dlock.New(srv.Client(t), dlock.WithOwnerInfo("writer"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	wctx, cancel := context.WithCancel(ctx)
	type result struct {
		l   *dlock.Lease
		err error
	}
	wch := make(chan result, 1)
	go func() {
		l, err := w.RWMutex(name).Lock(wctx)
		wch <- result{l, err}
	}()
	var writer *result
	defer func() {
		cancel()
		if writer == nil {
			r := <-wch
			writer = &r
		}
		if writer.err == nil {
			_ = writer.l.Unlock(ctx)
		}
	}()
	c := inspector(t, srv)
	rwState := func() dlock.LockInfo {
		infos, err := c.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range infos {
			if info.Kind == dlock.KindRWMutex {
				return info
			}
		}
		return dlock.LockInfo{}
	}
	waitUntil(t, "the writer queued", func() bool { return len(rwState().Waiters) == 1 })

	env := map[string]string{redisURLEnv: srv.URL()}
	r := runCLI(t, env, "unlock", "--force", "--owner", readers[0].Owner(), name)
	if r.code != exitOK {
		t.Fatalf("unlock --owner: exit %d, want %d", r.code, exitOK)
	}
	want := regexp.MustCompile(fmt.Sprintf(`^%q: released 1 holder; it was held by:\n  rwmutex: reader-1 \(token %d\)\n%q rwmutex: now held by reader-2 `,
		name, readers[0].Token(), name))
	if !want.MatchString(r.stdout) {
		t.Errorf("stdout %q, want it to match %q", r.stdout, want)
	}
	if info := rwState(); len(info.Holders) != 1 || info.Holders[0].Owner != readers[1].Owner() || len(info.Waiters) != 1 {
		t.Errorf("after unlock --owner: %+v, want the second reader holding and the writer waiting", info)
	}
	select {
	case <-readers[0].Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the released reader's lease is still not done")
	}
	if err := readers[0].Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("the released reader's Err = %v, want ErrLockLost", err)
	}
	if err := readers[1].Err(); err != nil {
		t.Errorf("the other reader's Err = %v, want nil", err)
	}

	r = runCLI(t, env, "unlock", "--force", "--owner", "deadbeef", name)
	if r.code != exitOK || r.stdout != fmt.Sprintf("%q: nothing was held by deadbeef\n", name) {
		t.Errorf("unlock --owner of no holder: exit %d, stdout %q; want 0 and nothing held", r.code, r.stdout)
	}

	short := readers[1].Owner()[:8] // as "dlock status" shows it
	r = runCLI(t, env, "unlock", "--force", "--owner", short, name)
	if r.code != exitOK || !strings.Contains(r.stdout, "rwmutex: reader-2 (token") {
		t.Errorf("unlock --owner %s: exit %d, stdout %q; want the second reader released", short, r.code, r.stdout)
	}
	select {
	case got := <-wch:
		writer = &got
	case <-time.After(30 * time.Second):
		t.Fatal("the writer did not get the lock after both readers were released")
	}
	if writer.err != nil {
		t.Fatalf("the writer's Lock: %v", writer.err)
	}
	if info := rwState(); len(info.Holders) != 1 || info.Holders[0].Owner != writer.l.Owner() {
		t.Errorf("after releasing both readers: %+v, want the writer holding", info)
	}
}

func TestUnlockOwnerUsage(t *testing.T) {
	// The server is unreachable: these are refused before connecting.
	for _, args := range [][]string{
		{"unlock", "--force", "--owner", "", "x"},
		{"unlock", "--force", "--owner=", "x"},
	} {
		r := runCLI(t, nil, append([]string{"--redis", "redis://127.0.0.1:1"}, args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--owner is empty") {
			t.Errorf("dlock %q: exit %d, stderr %q; want %d and --owner is empty", args, r.code, r.stderr, exitUsage)
		}
	}
	r := runCLI(t, nil, "--redis", "redis://127.0.0.1:1", "unlock", "--owner", "3f2a9c1b", "x")
	if r.code != exitUsage || !strings.Contains(r.stderr, "without --force") {
		t.Errorf("unlock --owner without --force: exit %d, stderr %q; want %d and a refusal", r.code, r.stderr, exitUsage)
	}
	r = runCLI(t, nil, "unlock", "--help")
	if r.code != exitOK || !strings.Contains(r.stdout, "--owner ID") || !strings.Contains(r.stdout, "unlock --force [--owner ID] NAME") {
		t.Errorf("unlock --help: exit %d, stdout %q; want --owner documented", r.code, r.stdout)
	}
}

func TestResolveOwner(t *testing.T) {
	const (
		a = "3f2a9c1b00000000000000000000000a"
		b = "3f2a9c1b00000000000000000000000b" // a's short form too
		c = "7c0ffee000000000000000000000000c"
		r = "5e1f00d500000000000000000000000d:job-1"
	)
	infos := []dlock.LockInfo{
		{Kind: dlock.KindRWMutex, Holders: []dlock.Holder{{Owner: a}, {Owner: b}, {Owner: c, Info: "pid=7"}}},
		{Kind: dlock.KindReentrant, Holders: []dlock.Holder{{Owner: r}}},
	}
	tests := []struct {
		id, want string
		usage    bool
	}{
		{id: a, want: a},
		{id: c, want: c},
		{id: "7c0ffee0", want: c},
		{id: c + ";pid=7", want: c},            // the key's whole value
		{id: c + ";pid=8", want: c + ";pid=8"}, // another info: left to find nothing
		{id: a + ";", want: a + ";"},           // a has no info
		{id: r, want: r},
		{id: "5e1f00d5:job-1", want: r},
		{id: "5e1f00d5:job-2", want: "5e1f00d5:job-2"}, // nobody: left to find nothing
		{id: "deadbeef", want: "deadbeef"},
		{id: "7c0ffee", want: "7c0ffee"}, // not the short form
		{id: "3f2a9c1b", usage: true},    // a and b
	}
	for _, tt := range tests {
		got, err := resolveOwner(infos, tt.id)
		var usage usageError
		if got != tt.want || errors.As(err, &usage) != tt.usage || (err != nil) != tt.usage {
			t.Errorf("resolveOwner(%q) = %q, %v; want %q (usage error: %v)", tt.id, got, err, tt.want, tt.usage)
		}
	}
}
