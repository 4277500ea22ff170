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

func TestWatchdogOutlivesSeveralTTLs(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(300*time.Millisecond))
	other := newClient(t, srv)
	name := t.Name()
	ctx := testCtx(t)
	lease := mustLock(t, c, name)

	deadline := time.Now().Add(1500 * time.Millisecond) // five TTLs
	for time.Now().Before(deadline) {
		select {
		case <-lease.Done():
			t.Fatalf("lease lost while renewing: %v", lease.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if _, err := other.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("another owner could take the renewed lock: %v", err)
		}
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("Err() = %v while held", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if !errors.Is(lease.Err(), dlock.ErrNotHeld) || errors.Is(lease.Err(), dlock.ErrLockLost) {
		t.Errorf("Err() after Unlock = %v, want ErrNotHeld and not ErrLockLost", lease.Err())
	}
	select {
	case <-lease.Done():
	default:
		t.Error("Done not closed after Unlock")
	}
}

func TestNoRenewalAfterUnlock(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb, counter := countingClient(t, srv)
	c, err := dlock.New(rdb, dlock.WithTTL(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t)
	for i := 0; i < 4; i++ {
		lease, err := c.Mutex(t.Name()).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond) // past the first renewal (at 200ms)
		if err := lease.Unlock(ctx); err != nil {
			t.Fatalf("round %d: Unlock: %v", i, err)
		}
	}
	before := counter.n.Load()
	time.Sleep(700 * time.Millisecond) // several renewal periods
	if after := counter.n.Load(); after != before {
		t.Errorf("%d commands sent after every lease was unlocked", after-before)
	}
}

func TestLossSignalledWhenKeyDeleted(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(600*time.Millisecond))
	name := t.Name()
	lease := mustLock(t, c, name)
	srv.Client(t).Del(context.Background(), lockKey(name))
	waitDone(t, lease, 5*time.Second) // the next renewal (TTL/3) notices
	if err := lease.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Err() = %v, want ErrLockLost", err)
	}
	if err := lease.Unlock(context.Background()); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock of a lost lease: got %v, want ErrNotHeld", err)
	}
	if err := lease.Extend(context.Background(), time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend of a lost lease: got %v, want ErrNotHeld", err)
	}
	if n := srv.Client(t).Exists(context.Background(), lockKey(name)).Val(); n != 0 {
		t.Error("the lost lock was re-created")
	}
}

func TestLossSignalledWhenKeyTakenOver(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(600*time.Millisecond))
	name := t.Name()
	lease := mustLock(t, c, name)
	rdb := srv.Client(t)
	rdb.Set(context.Background(), lockKey(name), "intruder", time.Minute)
	waitDone(t, lease, 5*time.Second)
	if err := lease.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Err() = %v, want ErrLockLost", err)
	}
	if err := lease.Unlock(context.Background()); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock: got %v, want ErrNotHeld", err)
	}
	if v := rdb.Get(context.Background(), lockKey(name)).Val(); v != "intruder" {
		t.Errorf("Unlock touched the new owner's key: %q", v)
	}
}

func TestLossSignalledByDeadlineWhenRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 500 * time.Millisecond
	c := newClient(t, srv, dlock.WithTTL(ttl))
	lease := mustLock(t, c, t.Name())
	acquired := time.Now()
	srv.Kill()
	waitDone(t, lease, 10*time.Second)
	// The local validity deadline is acquire + TTL - drift; allow generous
	// scheduling slack on a loaded machine, but it must not wait for Redis.
	if d := time.Since(acquired); d > ttl+time.Second {
		t.Errorf("loss signalled %v after acquire, want about the TTL (%v)", d, ttl)
	}
	err := lease.Err()
	if !errors.Is(err, dlock.ErrLockLost) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("Err() = %v, want ErrLockLost about the deadline", err)
	}
}

func TestExpiredLeaseNeverTouchesSuccessor(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	a := newClient(t, srv, dlock.WithTTL(100*time.Millisecond), dlock.WithAutoRenew(false))
	b := newClient(t, srv)
	name := t.Name()
	ctx := testCtx(t)
	old := mustLock(t, a, name)
	waitDone(t, old, 5*time.Second)
	if err := old.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("expired lease Err() = %v, want ErrLockLost", err)
	}
	waitFor(t, 5*time.Second, func() bool {
		return srv.Client(t).Exists(ctx, lockKey(name)).Val() == 0
	}, "the key to expire")
	successor := mustLock(t, b, name)
	defer successor.Unlock(ctx)

	if err := old.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("late Unlock: got %v, want ErrNotHeld", err)
	}
	if err := old.Extend(ctx, time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("late Extend: got %v, want ErrNotHeld", err)
	}
	if _, err := successor.TTL(ctx); err != nil {
		t.Errorf("successor's lock was disturbed: %v", err)
	}
	if successor.Token() <= old.Token() {
		t.Errorf("successor's token %d not above %d", successor.Token(), old.Token())
	}
}

func TestExtendAndTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(time.Second), dlock.WithAutoRenew(false))
	ctx := testCtx(t)
	lease := mustLock(t, c, t.Name())
	defer lease.Unlock(ctx)
	if err := lease.Extend(ctx, 20*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	d, err := lease.TTL(ctx)
	if err != nil || d < 19*time.Second || d > 20*time.Second {
		t.Fatalf("TTL after Extend(20s) = %v, %v", d, err)
	}
	// Extend also moves the local deadline: the lease outlives its first TTL.
	time.Sleep(1200 * time.Millisecond)
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost after Extend: %v", err)
	}
	if err := lease.Extend(ctx, 0); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Extend(0): got %v, want ErrInvalidArgument", err)
	}
}

func TestUnlockTwice(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	lease := mustLock(t, c, t.Name())
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Unlock: got %v, want ErrNotHeld", err)
	}
	if _, err := lease.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("TTL after Unlock: got %v, want ErrNotHeld", err)
	}
}

func TestUnlockWithCancelledContextStillReleases(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	name := t.Name()
	lease := mustLock(t, c, name)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with a cancelled context: %v", err)
	}
	if n := srv.Client(t).Exists(context.Background(), lockKey(name)).Val(); n != 0 {
		t.Error("lock still held after Unlock with a cancelled context")
	}
}

func TestMaxHold(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(300*time.Millisecond), dlock.WithMaxHold(700*time.Millisecond))
	name := t.Name()
	start := time.Now()
	lease := mustLock(t, c, name)
	waitDone(t, lease, 10*time.Second)
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Errorf("lease ended after %v, before the 700ms cap (renewal stopped too early)", d)
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrLockLost) || !strings.Contains(err.Error(), "maximum hold") {
		t.Fatalf("Err() = %v, want ErrLockLost about the maximum hold time", err)
	}
	waitFor(t, 5*time.Second, func() bool {
		return srv.Client(t).Exists(context.Background(), lockKey(name)).Val() == 0
	}, "the capped lock to expire")
}

func TestHolderCrashFreesLockWithinTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	const ttl = 400 * time.Millisecond
	crashed := newClient(t, srv, dlock.WithTTL(ttl))
	name := t.Name()
	lease := mustLock(t, crashed, name)
	_ = lease
	start := time.Now()
	_ = crashed.Close() // stops renewing without releasing, like a crash

	other := newClient(t, srv)
	l := mustLock(t, other, name)
	defer l.Unlock(context.Background())
	if d := time.Since(start); d > ttl+2*time.Second {
		t.Errorf("took %v to get a crashed holder's lock; want about its TTL (%v)", d, ttl)
	}
}

func TestCloseEndsWaitsAndLeases(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	holder := newClient(t, srv)
	c := newClient(t, srv)
	name := t.Name()
	ctx := testCtx(t)
	hl := mustLock(t, holder, name)
	defer hl.Unlock(ctx)
	own := mustLock(t, c, name+"-own")

	errc := make(chan error, 1)
	go func() {
		_, err := c.Mutex(name).Lock(ctx)
		errc <- err
	}()
	waitQueued(t, srv, name, 1)
	_ = c.Close()
	if err := <-errc; !errors.Is(err, dlock.ErrClosed) || !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("wait ended by Close: got %v, want ErrClosed and ErrNotObtained", err)
	}
	waitDone(t, own, time.Second)
	if err := own.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("lease after Close: Err() = %v, want ErrLockLost", err)
	}
	if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrClosed) || !strings.Contains(err.Error(), name) {
		t.Errorf("TryLock after Close: got %v, want ErrClosed, naming the lock", err)
	}
	if _, err := c.Semaphore(name, 2).Acquire(ctx, 1); !errors.Is(err, dlock.ErrClosed) || !strings.Contains(err.Error(), name) {
		t.Errorf("Semaphore.Acquire after Close: got %v, want ErrClosed, naming the lock", err)
	}
	// Close waited for the waiter's clean-up.
	if n := srv.Client(t).ZCard(ctx, lockKey(name)+":q").Val(); n != 0 {
		t.Errorf("the closed client's waiter is still queued")
	}
	// A lease lost to Close can still be released (Client.Close's doc).
	if err := own.Unlock(ctx); err != nil {
		t.Errorf("Unlock after Close: %v", err)
	}
	if n := srv.Client(t).Exists(ctx, lockKey(name+"-own")).Val(); n != 0 {
		t.Errorf("Unlock after Close left the lock held")
	}
}

// TestUnlockBehindAStuckRenewalIsBounded: Unlock waits for a renewal in
// flight before it sends the release, but no longer than the release
// timeout; the lease then ends lost, unrenewed, and a later Unlock still
// releases the lock. Without that later Unlock, the lock expires within its
// TTL: the lease went back to the watchdog, which renewed the lock for as
// long as the process lived, although its holder had given it up.
func TestUnlockBehindAStuckRenewalIsBounded(t *testing.T) {
	t.Parallel()
	for _, retry := range []bool{true, false} {
		t.Run(map[bool]string{true: "retried", false: "not retried"}[retry], func(t *testing.T) {
			ctx := dlock.WithOwner(testCtx(t), "job") // the helper warms up with a ReentrantMutex
			c, hook := clientWithHeldRenewals(t, ctx)
			// Far shorter than what is left of the lease's validity when its
			// renewal starts (2 s of the 3 s TTL), which bounds the renewal itself.
			const releaseTimeout = 200 * time.Millisecond
			const ttl = 3 * time.Second
			name := uniqueName(t)
			rec := &recorder{}
			l, err := c.Mutex(name, dlock.WithTTL(ttl), dlock.WithReleaseTimeout(releaseTimeout), dlock.WithObserver(rec)).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			hook.holdRenewal(t)
			cancelled, cancel := context.WithCancel(ctx)
			cancel() // a request that ended: Unlock still runs, bounded by the release timeout
			start := time.Now()
			err = l.Unlock(cancelled)
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "renewal") {
				t.Errorf("Unlock behind a stuck renewal: got %v, want the release timeout, saying a renewal is pending", err)
			}
			if took < releaseTimeout/2 || took > releaseTimeout+time.Second {
				t.Errorf("Unlock returned after %v; want about the release timeout (%v)", took, releaseTimeout)
			}
			if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) {
				t.Errorf("after the failed Unlock, Err = %v; want ErrLockLost", err)
			}
			// The Observer hears the failed release, as it does any.
			if got := rec.snapshot(); len(got.relErrs) != 1 || !errors.Is(got.relErrs[0], context.DeadlineExceeded) || len(got.lost) != 1 {
				t.Errorf("Observer after the failed Unlock: releases %v, losses %d; want one failed release and one loss", got.relErrs, len(got.lost))
			}
			hook.hold.Store(false)
			close(hook.resume)
			rdb := redistest.Shared(t).Client(t)
			if retry {
				if err := l.Unlock(ctx); err != nil {
					t.Fatalf("Unlock once the renewal returned: %v", err)
				}
				if n := rdb.Exists(ctx, lockKey(name)).Val(); n != 0 {
					t.Error("the lock is still held after the retried Unlock")
				}
				return
			}
			// The renewal held back extends the key once more when it
			// lands; nothing renews it after that.
			deadline := time.Now().Add(2*ttl + 2*time.Second)
			for rdb.Exists(ctx, lockKey(name)).Val() != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the lock is still held %v after an Unlock that gave up (PTTL %v): still renewed", 2*ttl+2*time.Second, rdb.PTTL(ctx, lockKey(name)).Val())
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestErrorsNameThePackageOnce: an error that wraps another of dlock's says
// "dlock:" once, at its start, and still matches the wrapped sentinel.
func TestErrorsNameThePackageOnce(t *testing.T) {
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	l := mustLock(t, c, t.Name())
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	_, badName := c.Mutex("").TryLock(ctx)
	for _, err := range []error{badName, l.Unlock(ctx), l.Extend(ctx, time.Second)} {
		if err == nil || strings.Count(err.Error(), "dlock:") != 1 || !strings.HasPrefix(err.Error(), "dlock: ") {
			t.Errorf("error %q: want \"dlock:\" once, at the start", err)
		}
	}
	if !errors.Is(badName, dlock.ErrInvalidArgument) {
		t.Errorf("%v does not match ErrInvalidArgument", badName)
	}
}
