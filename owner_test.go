package dlock_test

import (
	"context"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// holderWithToken returns the holder of info whose token is token, failing
// the test without one.
func holderWithToken(t *testing.T, info dlock.LockInfo, token int64) dlock.Holder {
	t.Helper()
	for _, h := range info.Holders {
		if h.Token == token {
			return h
		}
	}
	t.Fatalf("no holder with token %d in %+v", token, info)
	return dlock.Holder{}
}

// checkOwner checks that a lease's Owner is the Holder.Owner that Inspect
// reports for it, without the owner info.
func checkOwner(t *testing.T, what, owner string, h dlock.Holder) {
	t.Helper()
	if owner != h.Owner {
		t.Errorf("%s: Owner() = %q, Inspect's Holder.Owner = %q", what, owner, h.Owner)
	}
	if owner == "" || strings.Contains(owner, ";") || strings.Contains(owner, h.Info) {
		t.Errorf("%s: Owner() = %q, want the id alone (the holder's info is %q)", what, owner, h.Info)
	}
}

// TestOwnerMatchesInspect: a lease's (or permits') Owner is the owner that
// Inspect reports for it, for every kind, on a Client with owner info.
func TestOwnerMatchesInspect(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	c := newClient(t, srv, dlock.WithOwnerInfo("host=api-7 pid=4121"))
	for _, k := range []struct {
		name  string
		check func(*testing.T, context.Context, *dlock.Client, *redistest.Server)
	}{
		{"Mutex", checkOwnerMutex},
		{"FairMutex", checkOwnerFairMutex},
		{"MultiLock", checkOwnerMultiLock},
		{"RWMutex", checkOwnerRWMutex},
		{"ReentrantMutex", checkOwnerReentrantMutex},
		{"Semaphore", checkOwnerSemaphore},
		{"Redlock", checkOwnerRedlock},
	} {
		t.Run(k.name, func(t *testing.T) { k.check(t, ctx, c, srv) })
	}
}

// checkOwnerMutex: a Mutex's lease is its holder, named by 32 hex digits.
func checkOwnerMutex(t *testing.T, ctx context.Context, c *dlock.Client, srv *redistest.Server) {
	name := uniqueName(t)
	l := mustLock(t, c, name)
	defer unlockLease(l)
	info := infoOf(t, mustInspect(t, c, name), dlock.KindMutex)
	checkOwner(t, "Mutex", l.Owner(), holderWithToken(t, info, l.Token()))
	if !ownerID.MatchString(l.Owner()) {
		t.Errorf("Owner() = %q, want 32 hex digits", l.Owner())
	}
}

// checkOwnerFairMutex: a FairMutex's lease is its holder.
func checkOwnerFairMutex(t *testing.T, ctx context.Context, c *dlock.Client, srv *redistest.Server) {
	name := uniqueName(t)
	l, err := c.FairMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer unlockLease(l)
	info := infoOf(t, mustInspect(t, c, name), dlock.KindMutex)
	checkOwner(t, "FairMutex", l.Owner(), holderWithToken(t, info, l.Token()))
}

// checkOwnerMultiLock: a MultiLock's one owner holds each of its names.
func checkOwnerMultiLock(t *testing.T, ctx context.Context, c *dlock.Client, srv *redistest.Server) {
	a, b := uniqueName(t)+"{a}", uniqueName(t)+"{b}"
	l, err := c.MultiLock(a, b).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer unlockLease(l)
	for _, name := range []string{a, b} {
		tok, _ := l.TokenOf(name)
		info := infoOf(t, mustInspect(t, c, name), dlock.KindMutex)
		checkOwner(t, "MultiLock "+name, l.Owner(), holderWithToken(t, info, tok))
	}
}

// checkOwnerRWMutex: each reader, the writer and the reader Downgrade makes are holders of their own.
func checkOwnerRWMutex(t *testing.T, ctx context.Context, c *dlock.Client, srv *redistest.Server) {
	name := uniqueName(t)
	rw := c.RWMutex(name)
	var readers []*dlock.Lease
	for i := 0; i < 2; i++ {
		r, err := rw.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	info := infoOf(t, mustInspect(t, c, name), dlock.KindRWMutex)
	for i, r := range readers {
		checkOwner(t, "reader", r.Owner(), holderWithToken(t, info, r.Token()))
		unlockLease(r)
		if i == 1 && r.Owner() == readers[0].Owner() {
			t.Errorf("both readers have the owner %q", r.Owner())
		}
	}

	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info = infoOf(t, mustInspect(t, c, name), dlock.KindRWMutex)
	checkOwner(t, "writer", w.Owner(), holderWithToken(t, info, w.Token()))
	r, err := rw.Downgrade(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	defer unlockLease(r)
	info = infoOf(t, mustInspect(t, c, name), dlock.KindRWMutex)
	checkOwner(t, "downgraded reader", r.Owner(), holderWithToken(t, info, r.Token()))
	if r.Owner() == w.Owner() {
		t.Errorf("the read lease from Downgrade has the writer's owner %q", w.Owner())
	}
}

// checkOwnerReentrantMutex: an owner's holds all name it, after the Client's instance.
func checkOwnerReentrantMutex(t *testing.T, ctx context.Context, c *dlock.Client, srv *redistest.Server) {
	name := uniqueName(t)
	rctx := dlock.WithOwner(ctx, "job-1")
	var holds []*dlock.Lease
	for i := 0; i < 2; i++ {
		l, err := c.ReentrantMutex(name).Lock(rctx)
		if err != nil {
			t.Fatal(err)
		}
		defer unlockLease(l)
		holds = append(holds, l)
	}
	info := infoOf(t, mustInspect(t, c, name), dlock.KindReentrant)
	for _, l := range holds {
		checkOwner(t, "reentrant hold", l.Owner(), holderWithToken(t, info, l.Token()))
	}
	if !strings.HasSuffix(holds[0].Owner(), ":job-1") {
		t.Errorf("Owner() = %q, want <instance>:job-1", holds[0].Owner())
	}
}

// checkOwnerSemaphore: each acquisition of permits is a holder of its own.
func checkOwnerSemaphore(t *testing.T, ctx context.Context, c *dlock.Client, srv *redistest.Server) {
	name := uniqueName(t)
	var held []*dlock.Permits
	for _, n := range []int{2, 1} {
		p, err := c.Semaphore(name, 3).Acquire(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		defer releasePermits(p)
		held = append(held, p)
	}
	info := infoOf(t, mustInspect(t, c, name), dlock.KindSemaphore)
	for _, p := range held {
		checkOwner(t, "permits", p.Owner(), holderWithToken(t, info, p.Token()))
	}
	if held[0].Owner() == held[1].Owner() {
		t.Errorf("both acquisitions have the owner %q", held[0].Owner())
	}
}

// checkOwnerRedlock: a Redlock's lease is the holder that a Client's Inspect of one node sees.
func checkOwnerRedlock(t *testing.T, ctx context.Context, c *dlock.Client, srv *redistest.Server) {
	name := uniqueName(t)
	r := newRedlock(t, []string{srv.Addr()}, dlock.WithOwnerInfo("redlock"))
	l, err := r.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer unlockLease(l)
	info := infoOf(t, mustInspect(t, c, name), dlock.KindMutex)
	if len(info.Holders) != 1 {
		t.Fatalf("holders %+v, want the Redlock's", info.Holders)
	}
	checkOwner(t, "Redlock", l.Owner(), info.Holders[0])
}
