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
	name := uniqueLockName(t)
	readers := holdReaders(t, srv, name, "reader-1", "reader-2")
	writer := queueWriter(t, srv, name)
	c := inspector(t, srv)
	waitUntil(t, "the writer queued", func() bool { return len(rwInfo(t, c, name).Waiters) == 1 })

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
	if info := rwInfo(t, c, name); len(info.Holders) != 1 || info.Holders[0].Owner != readers[1].Owner() || len(info.Waiters) != 1 {
		t.Errorf("after unlock --owner: %+v, want the second reader holding and the writer waiting", info)
	}
	checkReaderReleased(t, readers[0], readers[1])

	r = runCLI(t, env, "unlock", "--force", "--owner", "deadbeef", name)
	if r.code != exitOK || r.stdout != fmt.Sprintf("%q: nothing was held by deadbeef\n", name) {
		t.Errorf("unlock --owner of no holder: exit %d, stdout %q; want 0 and nothing held", r.code, r.stdout)
	}

	short := readers[1].Owner()[:8] // as "dlock status" shows it
	r = runCLI(t, env, "unlock", "--force", "--owner", short, name)
	if r.code != exitOK || !strings.Contains(r.stdout, "rwmutex: reader-2 (token") {
		t.Errorf("unlock --owner %s: exit %d, stdout %q; want the second reader released", short, r.code, r.stdout)
	}
	l := writer.wait(t)
	if info := rwInfo(t, c, name); len(info.Holders) != 1 || info.Holders[0].Owner != l.Owner() {
		t.Errorf("after releasing both readers: %+v, want the writer holding", info)
	}
}

// holdReaders read-locks name once per owner info, each on a Client of
// its own with a short TTL.
func holdReaders(t *testing.T, srv *redistest.Server, name string, infos ...string) []*dlock.Lease {
	t.Helper()
	var readers []*dlock.Lease
	for _, info := range infos {
		c, err := dlock.New(srv.Client(t), dlock.WithOwnerInfo(info), dlock.WithTTL(600*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		r, err := c.RWMutex(name).RLock(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	return readers
}

// pendingWriter is a write Lock of its own Client ("writer"), waiting in
// a goroutine that the test's cleanup stops.
type pendingWriter struct {
	ch  chan lockResult
	got *lockResult
}

type lockResult struct {
	l   *dlock.Lease
	err error
}

// queueWriter starts name's write Lock: at the test's end it is cancelled
// if still waiting, and its lease unlocked if granted.
func queueWriter(t *testing.T, srv *redistest.Server, name string) *pendingWriter {
	t.Helper()
	w, err := dlock.New(srv.Client(t), dlock.WithOwnerInfo("writer"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	p := &pendingWriter{ch: make(chan lockResult, 1)}
	go func() {
		l, err := w.RWMutex(name).Lock(ctx)
		p.ch <- lockResult{l, err}
	}()
	t.Cleanup(func() {
		cancel()
		if p.got == nil {
			r := <-p.ch
			p.got = &r
		}
		if p.got.err == nil {
			_ = p.got.l.Unlock(context.Background())
		}
	})
	return p
}

// wait returns the writer's lease, failing the test when it is not granted
// within 30 s.
func (p *pendingWriter) wait(t *testing.T) *dlock.Lease {
	t.Helper()
	select {
	case got := <-p.ch:
		p.got = &got
	case <-time.After(30 * time.Second):
		t.Fatal("the writer did not get the lock after both readers were released")
	}
	if p.got.err != nil {
		t.Fatalf("the writer's Lock: %v", p.got.err)
	}
	return p.got.l
}

// rwInfo is what Inspect reports of name's read-write lock.
func rwInfo(t *testing.T, c *dlock.Client, name string) dlock.LockInfo {
	t.Helper()
	infos, err := c.Inspect(context.Background(), name)
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

// checkReaderReleased checks that released's lease ended as lost and that
// kept's did not.
func checkReaderReleased(t *testing.T, released, kept *dlock.Lease) {
	t.Helper()
	select {
	case <-released.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the released reader's lease is still not done")
	}
	if err := released.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("the released reader's Err = %v, want ErrLockLost", err)
	}
	if err := kept.Err(); err != nil {
		t.Errorf("the other reader's Err = %v, want nil", err)
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
