package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/redistest"
)

// async is an acquisition running in its own goroutine. When the test ends
// its context is cancelled, and what it obtained is released.
type async[T any] struct {
	done chan struct{}
	got  T
	err  error
}

// goAcquire runs acquire in a goroutine; release frees what it obtained.
func goAcquire[T any](t *testing.T, acquire func(context.Context) (T, error), release func(T)) *async[T] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &async[T]{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.got, a.err = acquire(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-a.done:
			if a.err == nil {
				release(a.got)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("an acquisition did not return within 30s of its context's end")
		}
	})
	return a
}

// await waits for the acquisition to succeed, failing after limit.
func (a *async[T]) await(t *testing.T, limit time.Duration, what string) T {
	t.Helper()
	select {
	case <-a.done:
		if a.err != nil {
			t.Fatalf("%s: %v", what, a.err)
		}
		return a.got
	case <-time.After(limit):
		t.Fatalf("%s: still waiting after %v", what, limit)
		var zero T
		return zero
	}
}

// wait waits for the acquisition to return, failing after limit, and
// returns what it returned.
func (a *async[T]) wait(t *testing.T, limit time.Duration) (T, error) {
	t.Helper()
	select {
	case <-a.done:
		return a.got, a.err
	case <-time.After(limit):
		t.Fatalf("an acquisition still waiting after %v", limit)
		var zero T
		return zero, nil
	}
}

// pending reports whether the acquisition is still waiting.
func (a *async[T]) pending() bool {
	select {
	case <-a.done:
		return false
	default:
		return true
	}
}

func unlockLease(l *dlock.Lease)      { _ = l.Unlock(context.Background()) }
func releasePermits(p *dlock.Permits) { _ = p.Release(context.Background()) }
func goLock(t *testing.T, lock func(context.Context) (*dlock.Lease, error)) *async[*dlock.Lease] {
	t.Helper()
	return goAcquire(t, lock, unlockLease)
}

// infoOf returns the LockInfo of kind in infos, failing the test without one.
func infoOf(t *testing.T, infos []dlock.LockInfo, kind dlock.Kind) dlock.LockInfo {
	t.Helper()
	for _, info := range infos {
		if info.Kind == kind {
			return info
		}
	}
	t.Fatalf("no %s in %+v", kind, infos)
	return dlock.LockInfo{}
}

// waitWaiters waits until Inspect shows n waiters of kind on name.
func waitWaiters(t *testing.T, c *dlock.Client, name string, kind dlock.Kind, n int) {
	t.Helper()
	waitFor(t, 10*time.Second, func() bool {
		infos, err := c.Inspect(context.Background(), name)
		if err != nil {
			t.Fatalf("Inspect(%q): %v", name, err)
		}
		for _, info := range infos {
			if info.Kind == kind {
				return len(info.Waiters) == n
			}
		}
		return n == 0
	}, fmt.Sprintf("%d %s waiters on %q", n, kind, name))
}

var ownerID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// checkTTL checks that a remaining time is positive and at most limit.
func checkTTL(t *testing.T, what string, d, limit time.Duration) {
	t.Helper()
	if d <= 0 || d > limit {
		t.Errorf("%s = %v, want in (0, %v]", what, d, limit)
	}
}

func TestInspectMutex(t *testing.T) {
	srv := redistest.Shared(t)
	name := uniqueName(t)
	c := newClient(t, srv, dlock.WithOwnerInfo("host=api-7 pid=4121"))
	l := mustLock(t, c, name)
	for i := 1; i <= 2; i++ {
		w := newClient(t, srv, dlock.WithOwnerInfo(fmt.Sprintf("waiter-%d", i)))
		goLock(t, w.Mutex(name).Lock)
		waitWaiters(t, c, name, dlock.KindMutex, i) // so they queue in this order
	}

	infos, err := c.Inspect(testCtx(t), name)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	if len(infos) != 1 {
		t.Fatalf("Inspect = %+v, want one LockInfo", infos)
	}
	info := infos[0]
	if info.Name != name || info.Kind != dlock.KindMutex || info.LastToken != l.Token() {
		t.Errorf("name %q kind %q last token %d, want %q %q %d", info.Name, info.Kind, info.LastToken, name, dlock.KindMutex, l.Token())
	}
	if len(info.Holders) != 1 {
		t.Fatalf("holders %+v, want one", info.Holders)
	}
	h := info.Holders[0]
	if !ownerID.MatchString(h.Owner) || h.Info != "host=api-7 pid=4121" || h.Token != l.Token() || h.Mode != "" || h.Holds != 0 || h.Permits != 0 {
		t.Errorf("holder %+v, want a 32-digit owner, the holder's info and token %d", h, l.Token())
	}
	checkTTL(t, "holder TTL", h.TTL, 30*time.Second)
	if len(info.Waiters) != 2 {
		t.Fatalf("waiters %+v, want two", info.Waiters)
	}
	for i, w := range info.Waiters {
		if w.Info != fmt.Sprintf("waiter-%d", i+1) || w.Position != i+1 || !ownerID.MatchString(w.Owner) || w.Owner == h.Owner {
			t.Errorf("waiter %d: %+v, want info waiter-%d at position %d", i, w, i+1, i+1)
		}
		checkTTL(t, "waiter lease left", w.LeaseLeft, 3*time.Second)
	}
}

func TestInspectMultiLockAndFairMutexShowAsMutex(t *testing.T) {
	srv := redistest.Shared(t)
	a, b := uniqueName(t)+"{a}", uniqueName(t)+"{b}"
	c := newClient(t, srv, dlock.WithOwnerInfo("multi"))
	l, err := c.MultiLock(a, b).Lock(testCtx(t))
	if err != nil {
		t.Fatalf("MultiLock: %v", err)
	}
	defer unlockLease(l)
	goLock(t, newClient(t, srv, dlock.WithOwnerInfo("fair")).FairMutex(a).Lock)
	waitWaiters(t, c, a, dlock.KindMutex, 1)

	infos, err := c.Inspect(testCtx(t), a)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	info := infoOf(t, infos, dlock.KindMutex)
	if len(infos) != 1 || len(info.Holders) != 1 || info.Holders[0].Info != "multi" || info.Waiters[0].Info != "fair" {
		t.Errorf("Inspect(%q) = %+v, want the MultiLock holding and the FairMutex waiting", a, infos)
	}
	if tok, _ := l.TokenOf(a); info.Holders[0].Token != tok {
		t.Errorf("holder token %d, want the MultiLock's token for %q, %d", info.Holders[0].Token, a, tok)
	}
}

func TestInspectReentrant(t *testing.T) {
	srv := redistest.Shared(t)
	name := uniqueName(t)
	c := newClient(t, srv, dlock.WithOwnerInfo("job runner"))
	ctx := dlock.WithOwner(testCtx(t), "job-1")
	rm := c.ReentrantMutex(name)
	l1, err := rm.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	defer unlockLease(l1)
	l2, err := rm.Lock(ctx)
	if err != nil {
		t.Fatalf("nested Lock: %v", err)
	}
	defer unlockLease(l2)
	other := newClient(t, srv, dlock.WithOwnerInfo("other runner"))
	goLock(t, func(ctx context.Context) (*dlock.Lease, error) {
		return other.ReentrantMutex(name).Lock(dlock.WithOwner(ctx, "job-2"))
	})
	waitWaiters(t, c, name, dlock.KindReentrant, 1)

	infos, err := c.Inspect(testCtx(t), name)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	info := infoOf(t, infos, dlock.KindReentrant)
	if len(infos) != 1 || len(info.Holders) != 1 || len(info.Waiters) != 1 {
		t.Fatalf("Inspect = %+v, want one reentrant lock, one holder, one waiter", infos)
	}
	h, w := info.Holders[0], info.Waiters[0]
	if !strings.HasSuffix(h.Owner, ":job-1") || h.Info != "job runner" || h.Holds != 2 || h.Token != l1.Token() || info.LastToken != l1.Token() {
		t.Errorf("holder %+v (last token %d), want owner ...:job-1, 2 holds, token %d", h, info.LastToken, l1.Token())
	}
	checkTTL(t, "holder TTL", h.TTL, 30*time.Second)
	if !strings.HasSuffix(w.Owner, ":job-2") || w.Info != "other runner" || w.Position != 1 {
		t.Errorf("waiter %+v, want owner ...:job-2", w)
	}
}

func TestInspectRWMutex(t *testing.T) {
	srv := redistest.Shared(t)
	name := uniqueName(t)
	c := newClient(t, srv)
	var readers []*dlock.Lease
	for i := 1; i <= 2; i++ {
		r, err := newClient(t, srv, dlock.WithOwnerInfo(fmt.Sprintf("reader-%d", i))).RWMutex(name).RLock(testCtx(t))
		if err != nil {
			t.Fatalf("RLock: %v", err)
		}
		readers = append(readers, r)
	}
	writer := goLock(t, newClient(t, srv, dlock.WithOwnerInfo("writer")).RWMutex(name).Lock)
	waitWaiters(t, c, name, dlock.KindRWMutex, 1)
	goLock(t, newClient(t, srv, dlock.WithOwnerInfo("reader-3")).RWMutex(name).RLock)
	waitWaiters(t, c, name, dlock.KindRWMutex, 2)

	infos, err := c.Inspect(testCtx(t), name)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	info := infoOf(t, infos, dlock.KindRWMutex)
	if len(info.Holders) != 2 {
		t.Fatalf("holders %+v, want the two readers", info.Holders)
	}
	for i, h := range info.Holders {
		if h.Mode != dlock.ModeRead || h.Info != fmt.Sprintf("reader-%d", i+1) || h.Token != readers[i].Token() {
			t.Errorf("holder %d: %+v, want reader-%d reading with token %d", i, h, i+1, readers[i].Token())
		}
		checkTTL(t, "reader TTL", h.TTL, 30*time.Second)
	}
	if info.LastToken != readers[1].Token() {
		t.Errorf("last token %d, want the second reader's %d", info.LastToken, readers[1].Token())
	}
	want := []struct{ mode, info string }{{dlock.ModeWrite, "writer"}, {dlock.ModeRead, "reader-3"}}
	if len(info.Waiters) != 2 {
		t.Fatalf("waiters %+v, want the writer, then reader-3", info.Waiters)
	}
	for i, w := range info.Waiters {
		if w.Mode != want[i].mode || w.Info != want[i].info || w.Position != i+1 {
			t.Errorf("waiter %d: %+v, want %s by %s", i, w, want[i].mode, want[i].info)
		}
	}

	for _, r := range readers {
		unlockLease(r)
	}
	wl := writer.await(t, 10*time.Second, "the writer after the readers left")
	info = infoOf(t, mustInspect(t, c, name), dlock.KindRWMutex)
	if len(info.Holders) != 1 || info.Holders[0].Mode != dlock.ModeWrite || info.Holders[0].Token != wl.Token() ||
		len(info.Waiters) != 1 || info.Waiters[0].Info != "reader-3" {
		t.Errorf("after the hand-off: %+v, want the writer holding and reader-3 waiting", info)
	}
}

func mustInspect(t *testing.T, c *dlock.Client, name string) []dlock.LockInfo {
	t.Helper()
	infos, err := c.Inspect(testCtx(t), name)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", name, err)
	}
	return infos
}

func TestInspectSemaphore(t *testing.T) {
	srv := redistest.Shared(t)
	name := uniqueName(t)
	c := newClient(t, srv)
	var held []*dlock.Permits
	for i, n := range []int{2, 1} {
		p, err := newClient(t, srv, dlock.WithOwnerInfo(fmt.Sprintf("holder-%d", i+1))).Semaphore(name, 3).Acquire(testCtx(t), n)
		if err != nil {
			t.Fatalf("Acquire(%d): %v", n, err)
		}
		defer releasePermits(p)
		held = append(held, p)
	}
	w := newClient(t, srv, dlock.WithOwnerInfo("waiter"))
	goAcquire(t, func(ctx context.Context) (*dlock.Permits, error) { return w.Semaphore(name, 3).Acquire(ctx, 2) }, releasePermits)
	waitWaiters(t, c, name, dlock.KindSemaphore, 1)

	info := infoOf(t, mustInspect(t, c, name), dlock.KindSemaphore)
	if info.Permits != 0 {
		t.Errorf("Permits = %d with no stored limit, want 0", info.Permits)
	}
	if len(info.Holders) != 2 {
		t.Fatalf("holders %+v, want two", info.Holders)
	}
	for i, h := range info.Holders {
		if h.Info != fmt.Sprintf("holder-%d", i+1) || h.Permits != held[i].N() || h.Token != held[i].Token() || !ownerID.MatchString(h.Owner) {
			t.Errorf("holder %d: %+v, want holder-%d with %d permits and token %d", i, h, i+1, held[i].N(), held[i].Token())
		}
		checkTTL(t, "permits TTL", h.TTL, 30*time.Second)
	}
	if len(info.Waiters) != 1 || info.Waiters[0].Permits != 2 || info.Waiters[0].Info != "waiter" {
		t.Errorf("waiters %+v, want one asking for 2", info.Waiters)
	}
	if info.LastToken != held[1].Token() {
		t.Errorf("last token %d, want %d", info.LastToken, held[1].Token())
	}

	if err := c.Semaphore(name, 3).SetPermits(testCtx(t), 4); err != nil {
		t.Fatalf("SetPermits: %v", err)
	}
	if info := infoOf(t, mustInspect(t, c, name), dlock.KindSemaphore); info.Permits != 4 {
		t.Errorf("Permits = %d after SetPermits(4)", info.Permits)
	}
}

func TestInspectLatchAndSeveralKinds(t *testing.T) {
	srv := redistest.Shared(t)
	name := uniqueName(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	l := c.Latch(name)
	if ok, err := l.TrySetCount(ctx, 3); !ok || err != nil {
		t.Fatalf("TrySetCount: %v, %v", ok, err)
	}
	if err := l.CountDown(ctx); err != nil {
		t.Fatalf("CountDown: %v", err)
	}
	infos := mustInspect(t, c, name)
	if len(infos) != 1 {
		t.Fatalf("Inspect = %+v, want the latch alone", infos)
	}
	if info := infos[0]; info.Kind != dlock.KindLatch || info.Count != 2 || len(info.Holders) != 0 || len(info.Waiters) != 0 {
		t.Errorf("latch: %+v, want count 2", info)
	}
	checkTTL(t, "latch TTL", infos[0].TTL, 24*time.Hour)

	lease := mustLock(t, c, name)
	defer unlockLease(lease)
	p, err := c.Semaphore(name, 1).TryAcquire(ctx, 1)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	defer releasePermits(p)
	var kinds []dlock.Kind
	for _, info := range mustInspect(t, c, name) {
		kinds = append(kinds, info.Kind)
	}
	if want := []dlock.Kind{dlock.KindMutex, dlock.KindSemaphore, dlock.KindLatch}; !slices.Equal(kinds, want) {
		t.Errorf("kinds %v, want %v", kinds, want)
	}
}

func TestInspectUnknownAndReleased(t *testing.T) {
	srv := redistest.Shared(t)
	name := uniqueName(t)
	c := newClient(t, srv)
	if infos := mustInspect(t, c, name); len(infos) != 0 {
		t.Errorf("Inspect of an unknown name = %+v, want nothing", infos)
	}
	l := mustLock(t, c, name)
	unlockLease(l)
	infos := mustInspect(t, c, name)
	if len(infos) != 1 || infos[0].Kind != dlock.KindMutex || len(infos[0].Holders) != 0 || infos[0].LastToken != l.Token() {
		t.Errorf("Inspect after Unlock = %+v, want a free mutex with last token %d", infos, l.Token())
	}
}

func TestInspectInvalidNameAndClosedClient(t *testing.T) {
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	for _, name := range []string{"", "}x", strings.Repeat("n", dlock.MaxNameLen+1)} {
		if _, err := c.Inspect(ctx, name); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("Inspect(%q): %v, want ErrInvalidArgument", name, err)
		}
		if _, err := c.ForceUnlock(ctx, name); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("ForceUnlock(%q): %v, want ErrInvalidArgument", name, err)
		}
	}
	c.Close()
	if _, err := c.Inspect(ctx, "x"); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Inspect after Close: %v, want ErrClosed", err)
	}
	if _, err := c.List(ctx, ""); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("List after Close: %v, want ErrClosed", err)
	}
	if _, err := c.ForceUnlock(ctx, "x"); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("ForceUnlock after Close: %v, want ErrClosed", err)
	}
}

func TestInspectKeyConflicts(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	tests := []struct {
		name, suffix string
		write        func(key string) error
	}{
		{"mutex key is a list", "", func(k string) error { return rdb.RPush(ctx, k, "a").Err() }},
		{"mutex key without expiry", "", func(k string) error { return rdb.Set(ctx, k, "someone", 0).Err() }},
		{"fence not a number", ":fence", func(k string) error { return rdb.Set(ctx, k, "abc", time.Hour).Err() }},
		{"reentrant holds is a string", ":re:holds", func(k string) error { return rdb.Set(ctx, k, "x", time.Hour).Err() }},
		{"rw holders is a string", ":rw", func(k string) error { return rdb.Set(ctx, k, "x", time.Hour).Err() }},
		{"semaphore limit without expiry", ":sem:limit", func(k string) error { return rdb.Set(ctx, k, 3, 0).Err() }},
		{"latch not a count", ":latch", func(k string) error { return rdb.Set(ctx, k, "-1", time.Hour).Err() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := uniqueName(t)
			key := lockKey(name) + tt.suffix
			if err := tt.write(key); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rdb.Del(context.Background(), key) })
			dump := rdb.Dump(ctx, key).Val()
			if _, err := c.Inspect(ctx, name); !errors.Is(err, dlock.ErrKeyConflict) {
				t.Errorf("Inspect: %v, want ErrKeyConflict", err)
			}
			if _, err := c.ForceUnlock(ctx, name); !errors.Is(err, dlock.ErrKeyConflict) {
				t.Errorf("ForceUnlock: %v, want ErrKeyConflict", err)
			}
			if rdb.Dump(ctx, key).Val() != dump {
				t.Errorf("the foreign key was modified")
			}
		})
	}
}

// uniqueName returns a lock name no other test, nor another run of this
// one (-count), uses on the shared server.
func uniqueName(t *testing.T) string { return uniquePrefix(t.Name() + "-") }

// uniquePrefix returns a key prefix no other test uses.
func uniquePrefix(base string) string {
	return base + redistest.RandomSuffix() + ":"
}

func names(infos []dlock.LockInfo) []string {
	var out []string
	for _, info := range infos {
		if len(out) == 0 || out[len(out)-1] != info.Name {
			out = append(out, info.Name)
		}
	}
	return out
}

func TestList(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	prefix := uniquePrefix("list*?[")
	c := newClient(t, srv, dlock.WithKeyPrefix(prefix))

	defer unlockLease(mustLock(t, c, "orders:1"))
	defer unlockLease(mustLock(t, c, "a"))
	defer unlockLease(mustLock(t, c, "a}b"))
	defer unlockLease(mustLock(t, c, "x*y"))
	r, err := c.RWMutex("orders:2").RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer unlockLease(r)
	p, err := c.Semaphore("{cart:7}:items", 2).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer releasePermits(p)
	if _, err := c.Latch("{cart:7}:total").TrySetCount(ctx, 2); err != nil {
		t.Fatal(err)
	}
	// Keys that are not dlock's, or under another prefix, are not listed.
	rdb.Set(ctx, prefix+"{zzz}:foreign", "x", time.Minute)
	rdb.Set(ctx, prefix+"plain", "x", time.Minute)
	other := newClient(t, srv, dlock.WithKeyPrefix(uniquePrefix("list-other")))
	defer unlockLease(mustLock(t, other, "orders:3"))

	all := []string{"a", "a}b", "orders:1", "orders:2", "x*y", "{cart:7}:items", "{cart:7}:total"}
	tests := []struct {
		pattern string
		want    []string
	}{
		{"", all},
		{"*", all},
		{"orders:*", []string{"orders:1", "orders:2"}},
		{"{cart:7}:*", []string{"{cart:7}:items", "{cart:7}:total"}},
		{"a", []string{"a"}}, // not "a}b", which SCAN's MATCH also returns
		{"a}*", []string{"a}b"}},
		{`x\*y`, []string{"x*y"}},
		{"orders:[2-9]", []string{"orders:2"}},
		{"nothing*", nil},
	}
	for _, tt := range tests {
		infos, err := c.List(ctx, tt.pattern)
		if err != nil {
			t.Errorf("List(%q): %v", tt.pattern, err)
			continue
		}
		if got := names(infos); !slices.Equal(got, tt.want) {
			t.Errorf("List(%q) = %q, want %q", tt.pattern, got, tt.want)
		}
	}

	infos, err := c.List(ctx, "{cart:7}:*")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].Kind != dlock.KindSemaphore || len(infos[0].Holders) != 1 ||
		infos[1].Kind != dlock.KindLatch || infos[1].Count != 2 {
		t.Errorf("List({cart:7}:*) = %+v, want the semaphore with its holder and the latch at 2", infos)
	}
}

func TestListKeepsOtherNamesOnAConflict(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	prefix := uniquePrefix("conflict")
	c := newClient(t, srv, dlock.WithKeyPrefix(prefix))
	defer unlockLease(mustLock(t, c, "good"))
	rdb.RPush(ctx, prefix+"{bad}", "x")
	t.Cleanup(func() { rdb.Del(context.Background(), prefix+"{bad}") })

	infos, err := c.List(ctx, "")
	if !errors.Is(err, dlock.ErrKeyConflict) || !strings.Contains(err.Error(), `"bad"`) {
		t.Errorf("List: %v, want ErrKeyConflict naming \"bad\"", err)
	}
	if got := names(infos); !slices.Equal(got, []string{"good"}) {
		t.Errorf("List returned %q, want the good name", got)
	}
}

// noScanDriver is a driver that cannot list keys.
type noScanDriver struct{ driver.Driver }

// Close passes Client.Close on to the wrapped driver, which has goroutines.
func (d noScanDriver) Close() error {
	if c, ok := d.Driver.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

func TestListWithoutScanner(t *testing.T) {
	srv := redistest.Shared(t)
	c, err := dlock.NewWithDriver(noScanDriver{goredis.New(srv.Client(t))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.List(testCtx(t), ""); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("List: %v, want errors.ErrUnsupported", err)
	}
	if infos, err := c.Inspect(testCtx(t), uniqueName(t)); err != nil || len(infos) != 0 {
		t.Errorf("Inspect still works without a Scanner: %v, %v", infos, err)
	}
}

func TestForceUnlockHandsTheLockToTheFirstWaiter(t *testing.T) {
	srv := redistest.Shared(t)
	name := uniqueName(t)
	ctx := testCtx(t)
	holder := newClient(t, srv, dlock.WithOwnerInfo("holder"), dlock.WithTTL(600*time.Millisecond))
	l := mustLock(t, holder, name)
	first := goLock(t, newClient(t, srv, dlock.WithOwnerInfo("first")).Mutex(name).Lock)
	op := newClient(t, srv)
	waitWaiters(t, op, name, dlock.KindMutex, 1)
	second := goLock(t, newClient(t, srv, dlock.WithOwnerInfo("second")).Mutex(name).Lock)
	waitWaiters(t, op, name, dlock.KindMutex, 2)

	n, err := op.ForceUnlock(ctx, name)
	if n != 1 || err != nil {
		t.Fatalf("ForceUnlock = %d, %v; want 1, nil", n, err)
	}
	fl := first.await(t, 10*time.Second, "the first waiter after ForceUnlock")
	if fl.Token() <= l.Token() {
		t.Errorf("the first waiter's token %d is not above the holder's %d", fl.Token(), l.Token())
	}
	info := infoOf(t, mustInspect(t, op, name), dlock.KindMutex)
	if len(info.Holders) != 1 || info.Holders[0].Info != "first" || len(info.Waiters) != 1 || info.Waiters[0].Info != "second" {
		t.Errorf("after ForceUnlock: %+v, want first holding and second waiting", info)
	}
	if !second.pending() {
		t.Errorf("the second waiter returned while the first holds the lock")
	}

	// The former holder hears of it at its next renewal.
	waitDone(t, l, 10*time.Second)
	if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("the former holder's Err = %v, want ErrLockLost", err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the former holder's Unlock = %v, want ErrNotHeld", err)
	}
	if info := infoOf(t, mustInspect(t, op, name), dlock.KindMutex); len(info.Holders) != 1 || info.Holders[0].Info != "first" {
		t.Errorf("the former holder's Unlock changed the lock: %+v", info)
	}
}

func TestForceUnlockEveryKind(t *testing.T) {
	srv := redistest.Shared(t)
	name := uniqueName(t)
	ctx := testCtx(t)
	short := dlock.WithTTL(600 * time.Millisecond)
	holder := newClient(t, srv, dlock.WithOwnerInfo("holder"), short)
	waiter := newClient(t, srv, dlock.WithOwnerInfo("waiter"))
	op := newClient(t, srv)

	// Reentrant: one owner with two holds, one waiter.
	rctx := dlock.WithOwner(ctx, "job")
	var former []*dlock.Lease
	for i := 0; i < 2; i++ {
		l, err := holder.ReentrantMutex(name).Lock(rctx)
		if err != nil {
			t.Fatal(err)
		}
		former = append(former, l)
	}
	reWaiter := goLock(t, func(ctx context.Context) (*dlock.Lease, error) {
		return waiter.ReentrantMutex(name).Lock(dlock.WithOwner(ctx, "other-job"))
	})
	waitWaiters(t, op, name, dlock.KindReentrant, 1)

	// RWMutex: two readers, a writer waiting.
	for i := 0; i < 2; i++ {
		r, err := holder.RWMutex(name).RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		former = append(former, r)
	}
	rwWaiter := goLock(t, waiter.RWMutex(name).Lock)
	waitWaiters(t, op, name, dlock.KindRWMutex, 1)

	// Semaphore of 3: 2 + 1 held; waiters for 2, 2 and 1, served strictly
	// in order: the release must grant the first one only, neither drop the
	// large requests (a limit too low) nor grant the others (too high).
	var permits []*dlock.Permits
	for _, n := range []int{2, 1} {
		p, err := holder.Semaphore(name, 3).Acquire(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, p)
	}
	var semWaiters []*async[*dlock.Permits]
	for i, n := range []int{2, 2, 1} {
		w := newClient(t, srv, dlock.WithOwnerInfo(fmt.Sprintf("sem-waiter-%d", i+1)))
		semWaiters = append(semWaiters, goAcquire(t, func(ctx context.Context) (*dlock.Permits, error) {
			return w.Semaphore(name, 3).Acquire(ctx, n)
		}, releasePermits))
		waitWaiters(t, op, name, dlock.KindSemaphore, i+1)
	}

	// A latch holds nothing and is left alone.
	if _, err := op.Latch(name).TrySetCount(ctx, 5); err != nil {
		t.Fatal(err)
	}

	n, err := op.ForceUnlock(ctx, name)
	if n != 5 || err != nil {
		t.Fatalf("ForceUnlock = %d, %v; want 5 holders released (1 reentrant owner, 2 readers, 2 semaphore holders)", n, err)
	}
	reWaiter.await(t, 10*time.Second, "the reentrant waiter")
	rwWaiter.await(t, 10*time.Second, "the writer")
	if p := semWaiters[0].await(t, 10*time.Second, "the first semaphore waiter"); p.N() != 2 {
		t.Errorf("the first semaphore waiter got %d permits", p.N())
	}
	sem := infoOf(t, mustInspect(t, op, name), dlock.KindSemaphore)
	if len(sem.Holders) != 1 || sem.Holders[0].Info != "sem-waiter-1" || len(sem.Waiters) != 2 ||
		sem.Waiters[0].Info != "sem-waiter-2" || sem.Waiters[1].Info != "sem-waiter-3" {
		t.Errorf("semaphore after ForceUnlock: %+v, want sem-waiter-1 holding, 2 and 3 waiting in order", sem)
	}
	for _, l := range former {
		waitDone(t, l, 10*time.Second)
		if !errors.Is(l.Err(), dlock.ErrLockLost) {
			t.Errorf("a former holder of %q: Err = %v, want ErrLockLost", l.Name(), l.Err())
		}
	}
	for _, p := range permits {
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("former permits still not done")
		}
		if !errors.Is(p.Err(), dlock.ErrLockLost) {
			t.Errorf("former permits: Err = %v, want ErrLockLost", p.Err())
		}
	}
	if n, err := op.Latch(name).Count(ctx); n != 5 || err != nil {
		t.Errorf("latch count = %d, %v after ForceUnlock; want 5", n, err)
	}
}

func TestForceUnlockWithNothingHeld(t *testing.T) {
	srv := redistest.Shared(t)
	name := uniqueName(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	if n, err := c.ForceUnlock(ctx, name); n != 0 || err != nil {
		t.Errorf("ForceUnlock of an unknown name = %d, %v; want 0, nil", n, err)
	}
	unlockLease(mustLock(t, c, name))
	if n, err := c.ForceUnlock(ctx, name); n != 0 || err != nil {
		t.Errorf("ForceUnlock of a released lock = %d, %v; want 0, nil", n, err)
	}
}

// testInspectListAndForceUnlockOnCluster is run by TestCluster
// (cluster_test.go), which starts one cluster for every Cluster test. Its
// own key prefix keeps the other tests' locks out of its List.
func testInspectListAndForceUnlockOnCluster(t *testing.T, cl *redistest.Cluster) {
	ctx := testCtx(t)
	c, err := dlock.New(cl.Client(t), dlock.WithOwnerInfo("on cluster"), dlock.WithKeyPrefix(uniquePrefix("inspect:")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// Names spread over the three masters.
	masters := map[string]bool{}
	var want []string
	for i := 0; len(masters) < 3 || len(want) < 6; i++ {
		name := fmt.Sprintf("job:%d", i)
		masters[cl.MasterForSlot(t, redistest.KeySlot(lockKey(name))).Addr()] = true
		want = append(want, name)
	}
	want = append(want, "{cart:7}:items", "{cart:7}:total")
	slices.Sort(want)
	for i, name := range want {
		var err error
		switch i % 3 {
		case 0:
			_, err = c.Mutex(name).Lock(ctx)
		case 1:
			_, err = c.RWMutex(name).RLock(ctx)
		default:
			_, err = c.Semaphore(name, 2).Acquire(ctx, 1)
		}
		if err != nil {
			t.Fatalf("acquiring %q: %v", name, err)
		}
	}

	infos, err := c.List(ctx, "")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if got := names(infos); !slices.Equal(got, want) {
		t.Errorf("List on the cluster = %q, want %q", got, want)
	}
	for _, info := range infos {
		if len(info.Holders) != 1 || info.Holders[0].Info != "on cluster" {
			t.Errorf("%q: %+v, want one holder", info.Name, info)
		}
	}
	infos, err = c.List(ctx, "{cart:7}:*")
	if err != nil || !slices.Equal(names(infos), []string{"{cart:7}:items", "{cart:7}:total"}) {
		t.Errorf("List({cart:7}:*) = %q, %v", names(infos), err)
	}
	for _, name := range want {
		if n, err := c.ForceUnlock(ctx, name); n != 1 || err != nil {
			t.Errorf("ForceUnlock(%q) = %d, %v; want 1, nil", name, n, err)
		}
		infos := mustInspect(t, c, name)
		if len(infos) != 1 || len(infos[0].Holders) != 0 {
			t.Errorf("Inspect(%q) after ForceUnlock = %+v, want no holder", name, infos)
		}
	}
}
