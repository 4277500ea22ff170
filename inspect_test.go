package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestInspectMutex(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
