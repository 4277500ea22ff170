package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

var leaseTests = []test{
	{"ExtendAndTTL", testExtendAndTTL},
	{"LossSignalledWhenKeyDeleted", testLossSignalledWhenKeyDeleted},
	{"TakeoverSeenByTTLAndExtend", testTakeoverSeenByTTLAndExtend},
	{"UnlockTwice", testUnlockTwice},
}

func testExtendAndTTL(t *testing.T, newClient NewClientFunc) {
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(time.Second), dlock.WithAutoRenew(false))
	rdb := inspector(t, srv)
	name := lockName(t)
	ctx := testCtx(t)
	lease := mustLock(t, c, name)
	defer mustUnlock(t, lease)

	if err := lease.Extend(ctx, 20*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if d, err := lease.TTL(ctx); err != nil || d < 19*time.Second || d > 20*time.Second {
		t.Errorf("TTL after Extend(20s) = %v, %v", d, err)
	}
	if d := rdb.PTTL(ctx, lockKey(name)).Val(); d < 19*time.Second || d > 20*time.Second {
		t.Errorf("PTTL after Extend(20s) = %v", d)
	}
	if err := lease.Extend(ctx, 0); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Extend(0): got %v, want ErrInvalidArgument", err)
	}
}

// testLossSignalledWhenKeyDeleted: the watchdog's next renewal (every TTL/3)
// finds the key gone and ends the lease.
func testLossSignalledWhenKeyDeleted(t *testing.T, newClient NewClientFunc) {
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(600*time.Millisecond))
	rdb := inspector(t, srv)
	name := lockName(t)
	ctx := testCtx(t)
	lease := mustLock(t, c, name)

	rdb.Del(ctx, lockKey(name))
	waitDone(t, lease, 5*time.Second)
	if err := lease.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Err() = %v, want ErrLockLost", err)
	}
	if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock of a lost lease: got %v, want ErrNotHeld", err)
	}
	if n := rdb.Exists(ctx, lockKey(name)).Val(); n != 0 {
		t.Error("the lost lock was re-created")
	}
}

// testTakeoverSeenByTTLAndExtend: without the watchdog, TTL and Extend are
// what find out that another owner has the key, and they leave it alone.
func testTakeoverSeenByTTLAndExtend(t *testing.T, newClient NewClientFunc) {
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithAutoRenew(false))
	rdb := inspector(t, srv)
	name := lockName(t)
	ctx := testCtx(t)
	own(t, rdb, lockKey(name), lockKey(name+":extend"))
	lease := mustLock(t, c, name)

	rdb.Set(ctx, lockKey(name), "intruder", time.Minute)
	if _, err := lease.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("TTL after a takeover: got %v, want ErrNotHeld", err)
	}
	waitDone(t, lease, 5*time.Second)
	if err := lease.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Err() = %v, want ErrLockLost", err)
	}
	if err := lease.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend after a takeover: got %v, want ErrNotHeld", err)
	}
	lease2 := mustLock(t, c, name+":extend")
	rdb.Set(ctx, lockKey(name+":extend"), "intruder", time.Minute)
	if err := lease2.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend after a takeover: got %v, want ErrNotHeld", err)
	}
	for _, n := range []string{name, name + ":extend"} {
		if v := rdb.Get(ctx, lockKey(n)).Val(); v != "intruder" {
			t.Errorf("the new owner's key of %q was changed to %q", n, v)
		}
	}
}

func testUnlockTwice(t *testing.T, newClient NewClientFunc) {
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	lease := mustLock(t, c, lockName(t))
	mustUnlock(t, lease)
	waitDone(t, lease, time.Second)
	if err := lease.Unlock(context.Background()); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Unlock: got %v, want ErrNotHeld", err)
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Err() after Unlock = %v, want ErrNotHeld", err)
	}
}
