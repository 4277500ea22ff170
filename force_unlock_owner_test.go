package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestForceUnlockOwnerReleasesOneReader(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := uniqueName(t)
	ctx := testCtx(t)
	short := dlock.WithTTL(600 * time.Millisecond)
	var readers []*dlock.Lease
	for _, info := range []string{"reader-1", "reader-2"} {
		r, err := newClient(t, srv, dlock.WithOwnerInfo(info), short).RWMutex(name).RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	defer unlockLease(readers[1])
	writer := goLock(t, newClient(t, srv, dlock.WithOwnerInfo("writer")).RWMutex(name).Lock)
	op := newClient(t, srv)
	waitWaiters(t, op, name, dlock.KindRWMutex, 1)

	n, err := op.ForceUnlockOwner(ctx, name, readers[0].Owner())
	if n != 1 || err != nil {
		t.Fatalf("ForceUnlockOwner(the first reader) = %d, %v; want 1, nil", n, err)
	}
	info := infoOf(t, mustInspect(t, op, name), dlock.KindRWMutex)
	if len(info.Holders) != 1 || info.Holders[0].Owner != readers[1].Owner() || len(info.Waiters) != 1 {
		t.Errorf("after releasing the first reader: %+v, want the second reader holding and the writer waiting", info)
	}
	if !writer.pending() {
		t.Errorf("the writer got the lock while the second reader holds it")
	}

	// The released reader learns it at its next renewal; the other keeps
	// its lease.
	waitDone(t, readers[0], 10*time.Second)
	if err := readers[0].Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("the released reader's Err = %v, want ErrLockLost", err)
	}
	if err := readers[0].Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the released reader's Unlock = %v, want ErrNotHeld", err)
	}
	if _, err := readers[1].TTL(ctx); err != nil || readers[1].Err() != nil {
		t.Errorf("the other reader lost its lease: TTL: %v, Err: %v", err, readers[1].Err())
	}
	if n, err := op.ForceUnlockOwner(ctx, name, readers[0].Owner()); n != 0 || err != nil {
		t.Errorf("ForceUnlockOwner(the released reader) again = %d, %v; want 0, nil", n, err)
	}

	// Releasing the last reader hands the lock to the waiting writer.
	if n, err := op.ForceUnlockOwner(ctx, name, readers[1].Owner()); n != 1 || err != nil {
		t.Fatalf("ForceUnlockOwner(the second reader) = %d, %v; want 1, nil", n, err)
	}
	wl := writer.await(t, 10*time.Second, "the writer after both readers were released")
	if wl.Token() <= readers[1].Token() {
		t.Errorf("the writer's token %d is not above the readers' %d", wl.Token(), readers[1].Token())
	}
}

func TestForceUnlockOwnerReleasesOneAcquisition(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := uniqueName(t)
	ctx := testCtx(t)
	var held []*dlock.Permits
	for _, info := range []string{"holder-1", "holder-2"} {
		p, err := newClient(t, srv, dlock.WithOwnerInfo(info), dlock.WithTTL(600*time.Millisecond)).Semaphore(name, 2).Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	defer releasePermits(held[1])
	w := newClient(t, srv, dlock.WithOwnerInfo("waiter"))
	waiter := goAcquire(t, func(ctx context.Context) (*dlock.Permits, error) { return w.Semaphore(name, 2).Acquire(ctx, 1) }, releasePermits)
	op := newClient(t, srv)
	waitWaiters(t, op, name, dlock.KindSemaphore, 1)

	n, err := op.ForceUnlockOwner(ctx, name, held[0].Owner())
	if n != 1 || err != nil {
		t.Fatalf("ForceUnlockOwner = %d, %v; want 1, nil", n, err)
	}
	got := waiter.await(t, 10*time.Second, "the waiter after one holder was released")
	info := infoOf(t, mustInspect(t, op, name), dlock.KindSemaphore)
	var owners []string
	for _, h := range info.Holders {
		owners = append(owners, h.Owner)
	}
	if len(owners) != 2 || owners[0] != held[1].Owner() || owners[1] != got.Owner() {
		t.Errorf("holders %q, want the second holder's %q and the waiter's %q", owners, held[1].Owner(), got.Owner())
	}
	select {
	case <-held[0].Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the released permits are still not done")
	}
	if err := held[0].Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("the released permits' Err = %v, want ErrLockLost", err)
	}
	if err := held[1].Err(); err != nil {
		t.Errorf("the other holder's permits: Err = %v, want nil", err)
	}
}

func TestForceUnlockOwnerHandsTheMutexToTheWaiter(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := uniqueName(t)
	ctx := testCtx(t)
	holder := newClient(t, srv, dlock.WithOwnerInfo("holder"), dlock.WithTTL(600*time.Millisecond))
	l := mustLock(t, holder, name)
	waiter := goLock(t, newClient(t, srv, dlock.WithOwnerInfo("waiter")).Mutex(name).Lock)
	op := newClient(t, srv)
	waitWaiters(t, op, name, dlock.KindMutex, 1)

	// A waiter holds nothing, and an unknown owner neither (nor the holder's
	// id with info that is not its own).
	waiting := infoOf(t, mustInspect(t, op, name), dlock.KindMutex).Waiters[0].Owner
	for _, owner := range []string{waiting, dlock.NewOwnerID(), l.Owner() + ";someone-else"} {
		if n, err := op.ForceUnlockOwner(ctx, name, owner); n != 0 || err != nil {
			t.Errorf("ForceUnlockOwner(%q) = %d, %v; want 0, nil", owner, n, err)
		}
	}
	if info := infoOf(t, mustInspect(t, op, name), dlock.KindMutex); len(info.Holders) != 1 || info.Holders[0].Owner != l.Owner() {
		t.Fatalf("after releasing owners that hold nothing: %+v, want the holder still holding", info)
	}

	if n, err := op.ForceUnlockOwner(ctx, name, l.Owner()); n != 1 || err != nil {
		t.Fatalf("ForceUnlockOwner(the holder) = %d, %v; want 1, nil", n, err)
	}
	wl := waiter.await(t, 10*time.Second, "the waiter after ForceUnlockOwner")
	if wl.Token() <= l.Token() {
		t.Errorf("the waiter's token %d is not above the holder's %d", wl.Token(), l.Token())
	}
	waitDone(t, l, 10*time.Second)
	if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("the former holder's Err = %v, want ErrLockLost", err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("the former holder's Unlock = %v, want ErrNotHeld", err)
	}
	if info := infoOf(t, mustInspect(t, op, name), dlock.KindMutex); len(info.Holders) != 1 || info.Holders[0].Owner != wl.Owner() {
		t.Errorf("after the former holder's Unlock: %+v, want the waiter holding", info)
	}
}

func TestForceUnlockOwnerReleasesEveryHoldOfAReentrantOwner(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := uniqueName(t)
	ctx := testCtx(t)
	holder := newClient(t, srv, dlock.WithTTL(600*time.Millisecond))
	rctx := dlock.WithOwner(ctx, "job")
	var holds []*dlock.Lease
	for i := 0; i < 2; i++ {
		l, err := holder.ReentrantMutex(name).Lock(rctx)
		if err != nil {
			t.Fatal(err)
		}
		holds = append(holds, l)
	}
	other := newClient(t, srv)
	waiter := goLock(t, func(ctx context.Context) (*dlock.Lease, error) {
		return other.ReentrantMutex(name).Lock(dlock.WithOwner(ctx, "other-job"))
	})
	op := newClient(t, srv)
	waitWaiters(t, op, name, dlock.KindReentrant, 1)

	// The same identity through another Client is another owner, which
	// holds nothing.
	waiting := infoOf(t, mustInspect(t, op, name), dlock.KindReentrant).Waiters[0].Owner
	sameIdentity := strings.TrimSuffix(waiting, ":other-job") + ":job"
	if sameIdentity == holds[0].Owner() || !strings.HasSuffix(waiting, ":other-job") {
		t.Fatalf("the waiter's owner is %q, the holder's %q: want different instances", waiting, holds[0].Owner())
	}
	if n, err := op.ForceUnlockOwner(ctx, name, sameIdentity); n != 0 || err != nil {
		t.Errorf("ForceUnlockOwner(%q, the same identity through another Client) = %d, %v; want 0, nil", sameIdentity, n, err)
	}
	if n, err := op.ForceUnlockOwner(ctx, name, holds[0].Owner()); n != 1 || err != nil {
		t.Fatalf("ForceUnlockOwner = %d, %v; want 1 (one owner, two holds), nil", n, err)
	}
	waiter.await(t, 10*time.Second, "the waiter after ForceUnlockOwner")
	for _, l := range holds {
		waitDone(t, l, 10*time.Second)
		if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) {
			t.Errorf("a released hold's Err = %v, want ErrLockLost", err)
		}
	}
}

// TestForceUnlockOwnerWithoutAutoRenew checks what the documentation says
// of a lease taken with WithAutoRenew(false) and released by another
// process: it is not told until it asks.
func TestForceUnlockOwnerWithoutAutoRenew(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := uniqueName(t)
	ctx := testCtx(t)
	l := mustLock(t, newClient(t, srv), name, dlock.WithAutoRenew(false))
	if n, err := newClient(t, srv).ForceUnlockOwner(ctx, name, l.Owner()); n != 1 || err != nil {
		t.Fatalf("ForceUnlockOwner = %d, %v; want 1, nil", n, err)
	}
	if err := l.Err(); err != nil {
		t.Errorf("Err before asking = %v, want nil (nothing renews it, so nothing told it)", err)
	}
	if _, err := l.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("TTL = %v, want ErrNotHeld", err)
	}
	waitDone(t, l, time.Second) // closed by TTL already
	if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Err after TTL = %v, want ErrLockLost", err)
	}
}

// A lock's whole key value, as redis-cli GET shows it, names its holder too;
// one whose info differs names nobody.
func TestForceUnlockOwnerTakesTheKeysWholeValue(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	c := newClient(t, srv, dlock.WithOwnerInfo("host=api-7 pid=4121"))
	op := newClient(t, srv)
	name := uniqueName(t)
	l := mustLock(t, c, name)
	defer unlockLease(l)

	whole := l.Owner() + ";host=api-7 pid=4121"
	if n, err := op.ForceUnlockOwner(ctx, name, l.Owner()+";host=api-8 pid=4121"); n != 0 || err != nil {
		t.Fatalf("ForceUnlockOwner(the id with another info) = %d, %v; want 0, nil", n, err)
	}
	if _, err := l.TTL(ctx); err != nil {
		t.Fatalf("the holder lost its lock to a value that is not its own: %v", err)
	}
	if n, err := op.ForceUnlockOwner(ctx, name, whole); n != 1 || err != nil {
		t.Fatalf("ForceUnlockOwner(%q) = %d, %v; want 1, nil", whole, n, err)
	}
	if _, err := l.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("TTL after the release = %v, want ErrNotHeld", err)
	}
}

func TestForceUnlockOwnerInvalidArguments(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	rdb, counter := countingClient(t, srv)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := uniqueName(t)
	l := mustLock(t, newClient(t, srv), name)
	defer unlockLease(l)

	before := counter.n.Load()
	if n, err := c.ForceUnlockOwner(ctx, name, ""); n != 0 || !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("ForceUnlockOwner with an empty owner = %d, %v; want 0, ErrInvalidArgument", n, err)
	}
	for _, bad := range []string{"", "}x", strings.Repeat("n", dlock.MaxNameLen+1)} {
		if _, err := c.ForceUnlockOwner(ctx, bad, l.Owner()); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("ForceUnlockOwner(%q): %v, want ErrInvalidArgument", bad, err)
		}
	}
	if sent := counter.n.Load() - before; sent != 0 {
		t.Errorf("invalid arguments sent %d commands, want none", sent)
	}
	if _, err := l.TTL(ctx); err != nil {
		t.Errorf("the holder lost its lock: %v", err)
	}
	c.Close()
	if _, err := c.ForceUnlockOwner(ctx, name, l.Owner()); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("ForceUnlockOwner after Close: %v, want ErrClosed", err)
	}
}
