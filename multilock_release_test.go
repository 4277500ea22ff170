package dlock_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// A MultiLock's all-at-once take that finds its last lock held has already
// taken the ones before it on its fast path: it must give them back within
// the same script, issue no token for any, and leave nothing behind.
func TestMultiLockFastPathUndoneWhenALockIsHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c, other := newClient(t, srv), newClient(t, srv)
	ctx := testCtx(t)
	p := t.Name() + ":" + dlock.NewOwnerID()[:8] + ":"
	a, b, z := p+"a", p+"b", p+"z"
	held := mustLock(t, other, z)
	rdb := srv.Client(t)
	fences := func() []string {
		return []string{rdb.Get(ctx, lockKey(a)+":fence").Val(), rdb.Get(ctx, lockKey(b)+":fence").Val()}
	}
	before := fences()

	_, err := c.MultiLock(a, b, z).TryLock(ctx)
	if !errors.Is(err, dlock.ErrNotObtained) || !strings.Contains(err.Error(), strconv.Quote(z)) {
		t.Fatalf("TryLock with %s held: got %v, want ErrNotObtained naming it", z, err)
	}
	if n := rdb.Exists(ctx, lockKey(a), lockKey(b)).Val(); n != 0 {
		t.Errorf("%d of the locks taken before the held one left behind", n)
	}
	if after := fences(); after[0] != before[0] || after[1] != before[1] {
		t.Errorf("fencing counters moved from %q to %q: a failed take issued tokens", before, after)
	}
	if got := rdb.Get(ctx, lockKey(z)).Val(); got != dlock.LeaseOwner(held) {
		t.Errorf("the held lock's key changed to %q", got)
	}

	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.MultiLock(a, b, z).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock once every lock is free: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A fast-path take whose second fencing key holds a foreign value has taken
// both locks and issued the first token: it undoes both grants, reports the
// conflict, and leaves the foreign value as it is. Once the value is gone,
// the first lock's next token is higher than any before (the skipped one
// included).
func TestMultiLockFastPathUndoneOnAForeignFencingKey(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	p := t.Name() + ":" + dlock.NewOwnerID()[:8] + ":"
	a, b := p+"a", p+"b"
	rdb := srv.Client(t)
	first, err := c.MultiLock(a).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, lockKey(b)+":fence", "007", 0)

	if _, err := c.MultiLock(a, b).TryLock(ctx); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Fatalf("TryLock with a foreign fencing key: got %v, want ErrKeyConflict", err)
	}
	if n := rdb.Exists(ctx, lockKey(a), lockKey(b)).Val(); n != 0 {
		t.Errorf("%d of the locks left taken after the conflict", n)
	}
	if v := rdb.Get(ctx, lockKey(b)+":fence").Val(); v != "007" {
		t.Errorf("the foreign fencing value changed to %q", v)
	}

	rdb.Del(ctx, lockKey(b)+":fence")
	l, err := c.MultiLock(a, b).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if tok, _ := l.TokenOf(a); tok <= first.Token() {
		t.Errorf("token of %s after the undone take: %d, want more than %d", a, tok, first.Token())
	}
}

// An Unlock of a MultiLock whose locks have waiters of other processes
// (here two of three) hands each of those to its own waiter, with a higher
// token, and frees the one nobody waits for.
func TestMultiLockUnlockHandsEachLockToItsWaiter(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	p := t.Name() + ":" + dlock.NewOwnerID()[:8] + ":"
	a, b, free := p+"a", p+"b", p+"c"
	l, err := c.MultiLock(a, b, free).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rdb := srv.Client(t)
	type grant struct {
		name string
		l    *dlock.Lease
		err  error
	}
	got := make(chan grant, 2)
	for _, name := range []string{a, b} {
		w := newClient(t, srv) // another process: no local hand-off
		go func(name string) {
			wl, err := w.Mutex(name).Lock(ctx)
			got <- grant{name, wl, err}
		}(name)
		waitFor(t, 10*time.Second, func() bool { return rdb.ZCard(ctx, lockKey(name)+":q").Val() == 1 },
			"a waiter to queue for "+name)
	}

	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	for i := 0; i < 2; i++ {
		var g grant
		select {
		case g = <-got:
		case <-time.After(30 * time.Second):
			t.Fatal("a waiter was not handed its lock")
		}
		if g.err != nil {
			t.Fatalf("waiter of %s: %v", g.name, g.err)
		}
		if tok, _ := l.TokenOf(g.name); g.l.Token() <= tok {
			t.Errorf("%s handed over with token %d, not above the MultiLock's %d", g.name, g.l.Token(), tok)
		}
		if v := rdb.Get(ctx, lockKey(g.name)).Val(); v != dlock.LeaseOwner(g.l) {
			t.Errorf("%s holds %q, not its waiter's owner %q", g.name, v, dlock.LeaseOwner(g.l))
		}
		if err := g.l.Unlock(ctx); err != nil {
			t.Errorf("waiter's Unlock of %s: %v", g.name, err)
		}
	}
	if n := rdb.Exists(ctx, lockKey(free), lockKey(free)+":q").Val(); n != 0 {
		t.Errorf("the lock nobody waited for is still there after Unlock")
	}
}

// An Unlock of a MultiLock one of whose locks was taken over meanwhile
// reports ErrNotHeld, leaves that lock to its new holder, and releases the
// others all the same.
func TestMultiLockUnlockReportsALostLockAndReleasesTheRest(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c, op := newClient(t, srv), newClient(t, srv)
	ctx := testCtx(t)
	p := t.Name() + ":" + dlock.NewOwnerID()[:8] + ":"
	a, b, d := p+"a", p+"b", p+"d"
	// Without renewal, nothing notices the loss before Unlock does.
	l, err := c.MultiLock(a, b, d).With(dlock.WithAutoRenew(false)).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.ForceUnlock(ctx, b); err != nil {
		t.Fatal(err)
	}
	z := mustLock(t, op, b)

	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock with %s taken over: got %v, want ErrNotHeld", b, err)
	}
	rdb := srv.Client(t)
	if n := rdb.Exists(ctx, lockKey(a), lockKey(d)).Val(); n != 0 {
		t.Errorf("%d of the locks still held were not released", n)
	}
	if v := rdb.Get(ctx, lockKey(b)).Val(); v != dlock.LeaseOwner(z) {
		t.Errorf("the lock taken over holds %q, not its new holder's %q", v, dlock.LeaseOwner(z))
	}
	if err := z.Unlock(ctx); err != nil {
		t.Errorf("the new holder's Unlock: %v", err)
	}
}

// A MultiLock's release call that fails (here never sent) may have released
// any of its locks: the lease ends lost, and Unlock called again releases
// them all.
func TestMultiLockUnlockRetriedAfterItsReleaseCallFailed(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := redis.NewClient(srv.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(&failFirst{match: func(cmd redis.Cmder) bool { return isScriptCall(cmd, scripts.MultiRelease) }})
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := testCtx(t)
	p := t.Name() + ":" + dlock.NewOwnerID()[:8] + ":"
	l, err := c.MultiLock(p+"a", p+"b").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, errInjected) {
		t.Fatalf("Unlock whose release call failed: got %v, want the injected failure", err)
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("after the failed release, Err = %v, want ErrLockLost", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("retried Unlock: got %v, want nil", err)
	}
	if n := srv.Client(t).Exists(ctx, lockKey(p+"a"), lockKey(p+"b")).Val(); n != 0 {
		t.Errorf("%d of the two locks still held after the retried Unlock", n)
	}
}
