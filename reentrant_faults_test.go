package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A reentrant owner that holds its lock for long and locks it again in
// nested calls (a job that runs for days) must not retain anything per
// nested hold once that hold is unlocked: each hold hung a loss callback,
// with its lease, on the owner's shared renewal until the owner's last
// hold ended.
func TestReentrantNestedHoldsRetainNothingOnceUnlocked(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := dlock.WithOwner(testCtx(t), "job")
	m := c.ReentrantMutex(uniqueName(t))
	outer, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	base := dlock.ClientRetained(c).LossFuncs
	const nested = 200
	for i := 0; i < nested; i++ {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := dlock.ClientRetained(c).LossFuncs; got != base {
		t.Errorf("after %d nested holds locked and unlocked, the owner's renewal carries %d loss callbacks; want %d, as before them", nested, got, base)
	}
	// Still told of a loss: a nested hold held when the owner loses the lock.
	inner, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ForceUnlock(ctx, m.Name()); err != nil {
		t.Fatal(err)
	}
	if _, err := outer.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("TTL after ForceUnlock: %v, want ErrNotHeld", err)
	}
	select {
	case <-inner.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the nested hold was not told that its owner lost the lock")
	}
	if !errors.Is(inner.Err(), dlock.ErrLockLost) {
		t.Errorf("nested hold's Err = %v, want ErrLockLost", inner.Err())
	}
}

// A reentrant owner's last hold whose release fails (Redis did not answer
// in time: the release may not have landed) is lost, as any lease whose
// release fails, and the lock must then expire within its TTL, as a
// Mutex's does: the owner's shared renewal went on counting that hold, and
// renewed the lock for as long as the process lived, with no Lease left to
// release it.
func TestReentrantFailedReleaseStopsTheOwnersRenewal(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	// A short read timeout: the release the blackhole swallows holds up
	// Close until go-redis gives up on it.
	prdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = prdb.Close() })
	c, err := dlock.New(prdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := dlock.WithOwner(testCtx(t), "job")
	const ttl = 500 * time.Millisecond
	m := c.ReentrantMutex(uniqueName(t), dlock.WithTTL(ttl), dlock.WithReleaseTimeout(100*time.Millisecond))
	key := "dlock:{" + m.Name() + "}:re"
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole(true)
	err = l.Unlock(ctx)
	proxy.Blackhole(false)
	if err == nil {
		t.Fatal("Unlock succeeded through a blackhole")
	}
	if !errors.Is(l.Err(), dlock.ErrLockLost) {
		t.Fatalf("lease after a failed Unlock: %v, want ErrLockLost", l.Err())
	}
	// The release was dropped: the key is still there, and must expire.
	waitFor(t, 10*ttl, func() bool { return rdb.Exists(ctx, key).Val() == 0 },
		"the lock to expire after its last hold's release failed (still renewed)")
	if got := dlock.ClientRetained(c); got.Anchors != 0 || got.Leases != 0 {
		t.Errorf("the Client retains %+v after the owner's only hold ended", got)
	}
	// Unlock again, as the doc allows: nothing is left to release.
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Unlock: %v, want ErrNotHeld", err)
	}
	// The owner can take the lock again.
	l2, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
