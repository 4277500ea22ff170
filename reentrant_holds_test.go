package dlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// An owner's first hold is recorded by the lock's key alone; a second hold
// creates the holds set, which then counts them all until the last is
// released (reentrant_acquire.lua). These tests walk those transitions.

func init() {
	registerChildMode("reentrant-hold-once", func(ctx context.Context, c *dlock.Client, name string, ready func()) error {
		ctx = dlock.WithOwner(ctx, "child")
		if _, err := c.ReentrantMutex(name, dlock.WithTTL(time.Second)).Lock(ctx); err != nil {
			return err
		}
		ready()
		return nil
	})
}

func holdsKey(name string) string { return reentrantKey(name) + ":holds" }

// wantHolds checks the owner's hold count as HoldCount and Inspect report
// it, and the size of the holds set in Redis (0: no set).
func wantHolds(ctx context.Context, t *testing.T, srv *redistest.Server, c *dlock.Client, name string, holds int, set int64) {
	t.Helper()
	if n := holdCount(t, c.ReentrantMutex(name), ctx); n != holds {
		t.Errorf("HoldCount = %d, want %d", n, holds)
	}
	infos, err := c.Inspect(ctx, name)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	got := -1 // no holder
	for _, info := range infos {
		if info.Kind != dlock.KindReentrant {
			continue
		}
		if len(info.Holders) > 1 {
			t.Fatalf("Inspect shows %d holders of a ReentrantMutex", len(info.Holders))
		}
		if len(info.Holders) == 1 {
			got = info.Holders[0].Holds
		}
	}
	switch {
	case holds == 0 && got != -1:
		t.Errorf("Inspect shows a holder with %d holds, want none", got)
	case holds > 0 && got != holds:
		t.Errorf("Inspect shows %d holds (-1: no holder), want %d", got, holds)
	}
	if n := srv.Client(t).SCard(ctx, holdsKey(name)).Val(); n != set {
		t.Errorf("the holds set has %d members, want %d", n, set)
	}
}

// wantHeld checks that another owner cannot take the lock.
func wantHeld(ctx context.Context, t *testing.T, m *dlock.ReentrantMutex) {
	t.Helper()
	if _, err := m.TryLock(dlock.WithOwner(ctx, "someone-else")); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("another owner's TryLock: got %v, want ErrNotObtained", err)
	}
}

// The first hold writes no holds set; a second creates it with both; the
// holds are released in either order, a released one is never counted
// again, and the last release leaves no key behind.
func TestReentrantHoldsSetOnlyFromTheSecondHold(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		grantFirst bool // release the hold that took the grant first
	}{{"GrantHoldFirst", true}, {"NestedHoldFirst", false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Shared(t)
			c := newClient(t, srv)
			name := t.Name()
			ctx := dlock.WithOwner(testCtx(t), "job")
			m := c.ReentrantMutex(name)

			grant, err := m.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wantHolds(ctx, t, srv, c, name, 1, 0)
			nested, err := m.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wantHolds(ctx, t, srv, c, name, 2, 2)

			first, second := grant, nested
			if !tc.grantFirst {
				first, second = nested, grant
			}
			if err := first.Unlock(ctx); err != nil {
				t.Fatalf("first Unlock: %v", err)
			}
			wantHolds(ctx, t, srv, c, name, 1, 1)
			wantHeld(ctx, t, m)
			if err := second.Err(); err != nil {
				t.Fatalf("the remaining hold ended with the first: %v", err)
			}
			if err := first.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("second Unlock of one hold: got %v, want ErrNotHeld", err)
			}
			wantHolds(ctx, t, srv, c, name, 1, 1)

			third, err := m.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wantHolds(ctx, t, srv, c, name, 2, 2)
			if third.Token() != second.Token() {
				t.Errorf("a hold added to the set carries token %d, the grant's is %d", third.Token(), second.Token())
			}
			if err := third.Unlock(ctx); err != nil {
				t.Fatalf("third Unlock: %v", err)
			}
			wantHolds(ctx, t, srv, c, name, 1, 1)
			wantHeld(ctx, t, m)
			if err := second.Unlock(ctx); err != nil {
				t.Fatalf("last Unlock: %v", err)
			}
			wantHolds(ctx, t, srv, c, name, 0, 0)
			if n := srv.Client(t).Exists(ctx, reentrantKey(name), holdsKey(name)).Val(); n != 0 {
				t.Errorf("%d keys left after the last Unlock", n)
			}
			l, err := m.TryLock(dlock.WithOwner(ctx, "someone-else"))
			if err != nil {
				t.Fatalf("the lock is not free after the last Unlock: %v", err)
			}
			_ = l.Unlock(ctx)
		})
	}
}

// A lone hold's Unlock, a second Unlock of it, and ForceUnlock of a lone
// hold all go by the lock's key alone.
func TestReentrantLoneHold(t *testing.T) {
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := dlock.WithOwner(testCtx(t), "job")

	t.Run("Unlock", func(t *testing.T) {
		name := t.Name()
		m := c.ReentrantMutex(name)
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantHeld(ctx, t, m)
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("second Unlock: got %v, want ErrNotHeld", err)
		}
		wantHolds(ctx, t, srv, c, name, 0, 0)
	})
	t.Run("ForceUnlock", func(t *testing.T) {
		name := t.Name()
		m := c.ReentrantMutex(name)
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantHolds(ctx, t, srv, c, name, 1, 0)
		n, err := newClient(t, srv).ForceUnlock(ctx, name)
		if err != nil || n != 1 {
			t.Fatalf("ForceUnlock = %d, %v; want 1 holder released", n, err)
		}
		wantHolds(ctx, t, srv, c, name, 0, 0)
		if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Unlock after ForceUnlock: got %v, want ErrNotHeld", err)
		}
	})
}

// When the last hold is one that the set counts alone (the grant's own was
// released first), the local hand-off passes the lock on with its one
// hold and no set, as from a lone grant.
func TestReentrantLocalHandOffFromTheSet(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	var transfers atomic.Int32
	rdb.AddHook(afterCmd(func(cmd redis.Cmder, err error) {
		if err == nil && isScriptCall(cmd, scripts.ReentrantTransfer) {
			transfers.Add(1)
		}
	}))
	x, c := newClient(t, srv), newClientOn(t, rdb)
	dlock.SetStandbyGrace(c, time.Minute) // b waits for a's hand-off, not in Redis
	name := t.Name()
	ctx := testCtx(t)
	held, err := x.ReentrantMutex(name).Lock(dlock.WithOwner(ctx, "x"))
	if err != nil {
		t.Fatal(err)
	}

	// a and then b of one Client wait in its line; a takes the lock
	// through Redis when x unlocks, b waits for a's hand-off.
	m := c.ReentrantMutex(name)
	a, b := dlock.WithOwner(ctx, "a"), dlock.WithOwner(ctx, "b")
	type grant struct {
		l   *dlock.Lease
		err error
	}
	grants := [2]chan grant{make(chan grant, 1), make(chan grant, 1)}
	for i, octx := range []context.Context{a, b} {
		go func(octx context.Context, out chan<- grant) {
			l, err := m.Lock(octx)
			out <- grant{l, err}
		}(octx, grants[i])
		want := i + 1
		waitFor(t, 10*time.Second, func() bool {
			return dlock.LineWaiters(c, reentrantKey(name)) == want
		}, "the hold to line up")
	}
	receive := func(who int) *dlock.Lease {
		t.Helper()
		select {
		case g := <-grants[who]:
			if g.err != nil {
				t.Fatalf("Lock of waiter %d: %v", who, g.err)
			}
			return g.l
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d was not granted the lock", who)
		}
		return nil
	}
	if err := held.Unlock(dlock.WithOwner(ctx, "x")); err != nil {
		t.Fatal(err)
	}
	first := receive(0)
	wantHolds(a, t, srv, c, name, 1, 0)
	nested, err := m.Lock(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Unlock(a); err != nil {
		t.Fatal(err)
	}
	wantHolds(a, t, srv, c, name, 1, 1)

	if err := nested.Unlock(a); err != nil {
		t.Fatalf("a's last Unlock: %v", err)
	}
	l := receive(1)
	if n := transfers.Load(); n != 1 {
		t.Errorf("%d local hand-offs (reentrant_transfer.lua), want 1", n)
	}
	if l.Token() <= nested.Token() {
		t.Errorf("b's token %d is not above a's %d", l.Token(), nested.Token())
	}
	wantHolds(b, t, srv, c, name, 1, 0)
	if n := holdCount(t, m, a); n != 0 {
		t.Errorf("a's HoldCount after its last Unlock = %d", n)
	}
	if err := l.Unlock(b); err != nil {
		t.Fatalf("b's Unlock: %v", err)
	}
	if n := reentrantKeysLeft(ctx, t, srv, name); n != 0 {
		t.Errorf("%d keys left after b's Unlock", n)
	}
}

// A process killed while it holds the lock once leaves only the lock's
// key, which expires by its TTL.
func TestReentrantKilledLoneHolderFreesTheLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	holder := startChild(t, srv.Addr(), "reentrant-hold-once", name) // TTL 1s
	c := newClient(t, srv)
	ctx := dlock.WithOwner(testCtx(t), "parent")
	if _, err := c.ReentrantMutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("the child's lock is not held: %v", err)
	}
	if n := srv.Client(t).Exists(ctx, holdsKey(name)).Val(); n != 0 {
		t.Errorf("a lone hold wrote the holds set")
	}
	killed := time.Now()
	holder.kill()
	l, err := c.ReentrantMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(killed); d > 2500*time.Millisecond {
		t.Errorf("got the killed holder's lock after %v; want within its 1s TTL plus a poll", d)
	}
	wantHolds(ctx, t, srv, c, name, 1, 0)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
