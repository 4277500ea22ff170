package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A reentrant owner that holds its lock for long and locks it again in
// nested calls (a job that runs for days) must not retain anything per
// nested hold once that hold is unlocked: each hold hung a loss callback,
// with its lease, on the owner's shared renewal until the owner's last
// hold ended.
func TestReentrantNestedHoldsRetainNothingOnceUnlocked(t *testing.T) {
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
