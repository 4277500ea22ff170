package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestDoRunsUnderTheLockAndReleases(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	name := t.Name()
	ctx := testCtx(t)
	errFn := errors.New("fn failed")
	err := c.Do(ctx, name, func(ctx context.Context) error {
		if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("inside Do the lock is not held: %v", err)
		}
		return errFn
	})
	if !errors.Is(err, errFn) {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
	if n := srv.Client(t).Exists(ctx, lockKey(name)).Val(); n != 0 {
		t.Error("Do did not release the lock")
	}
}

func TestDoCancelsFnWhenTheLockIsLost(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	name := t.Name()
	ctx := testCtx(t)
	err := c.Do(ctx, name, func(ctx context.Context) error {
		srv.Client(t).Del(ctx, lockKey(name))
		select {
		case <-ctx.Done():
			if !errors.Is(context.Cause(ctx), dlock.ErrLockLost) {
				t.Errorf("fn's context cause = %v, want ErrLockLost", context.Cause(ctx))
			}
			return nil
		case <-time.After(30 * time.Second):
			t.Error("fn's context was not cancelled after the lock was lost")
			return nil
		}
	}, dlock.WithTTL(300*time.Millisecond))
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do returned %v, want ErrLockLost", err)
	}
}

func TestDoReleasesWhenFnPanics(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	name := t.Name()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic did not propagate")
			}
		}()
		_ = c.Do(testCtx(t), name, func(context.Context) error { panic("boom") })
	}()
	if n := srv.Client(t).Exists(context.Background(), lockKey(name)).Val(); n != 0 {
		t.Error("the lock stayed held after fn panicked")
	}
}

func TestDoWhenNotObtained(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	name := t.Name()
	hold := mustLock(t, c, name)
	defer hold.Unlock(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	ran := false
	err := c.Do(ctx, name, func(context.Context) error { ran = true; return nil })
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want ErrNotObtained and DeadlineExceeded", err)
	}
	if ran {
		t.Error("fn ran without the lock")
	}
}

// TestDoWaitTimeoutBoundsOnlyTheWait: WithWaitTimeout gives up on a held
// lock after its timeout, and once the lock is taken fn runs past it,
// reaching its lease's token through LeaseFromContext.
func TestDoWaitTimeoutBoundsOnlyTheWait(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	name := t.Name()
	ctx := testCtx(t)
	held := mustLock(t, c, name)
	began := time.Now()
	err := c.Do(ctx, name, func(context.Context) error { return nil }, dlock.WithWaitTimeout(200*time.Millisecond))
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do on a held lock: %v; want ErrNotObtained and DeadlineExceeded", err)
	}
	if took := time.Since(began); took < 200*time.Millisecond {
		t.Errorf("Do gave up after %v; want the 200ms wait", took)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	err = c.Do(ctx, name, func(ctx context.Context) error {
		l, ok := dlock.LeaseFromContext(ctx)
		if !ok || l.Token() <= held.Token() || l.Name() != name {
			t.Errorf("LeaseFromContext: %v, %v; want the lease, with a token after %d", l, ok, held.Token())
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(400 * time.Millisecond): // work outlasting the wait's timeout
		}
		return l.Err()
	}, dlock.WithWaitTimeout(200*time.Millisecond))
	if err != nil {
		t.Errorf("Do whose work outlasts the wait timeout: %v; want nil", err)
	}
	if _, ok := dlock.LeaseFromContext(ctx); ok {
		t.Error("LeaseFromContext found a lease outside Do")
	}
	if err := c.Do(ctx, name, func(context.Context) error { return nil }, dlock.WithWaitTimeout(-time.Second)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("a negative WithWaitTimeout: %v; want ErrInvalidArgument", err)
	}
}

// TestWaitTimeoutBoundsEveryWait: WithWaitTimeout bounds the wait of every
// call that waits, not Do's alone, and the error says the wait ended.
func TestWaitTimeoutBoundsEveryWait(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	const bound = 300 * time.Millisecond
	holder := newClient(t, srv)
	waiter := newClient(t, srv, dlock.WithWaitTimeout(bound))
	rl := newRedlock(t, redistest.SharedNodeAddrs(3), dlock.WithWaitTimeout(bound))
	ctx := dlock.WithOwner(testCtx(t), "holder")
	other := dlock.WithOwner(testCtx(t), "waiter")
	name := uniqueName(t)
	held := func(l *dlock.Lease, err error) func() {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return func() { _ = l.Unlock(ctx) }
	}
	defer held(holder.Mutex(name + "-m").Lock(ctx))()
	defer held(holder.Mutex(name + "-multi").Lock(ctx))()
	defer held(holder.ReentrantMutex(name + "-r").Lock(ctx))()
	defer held(holder.RWMutex(name + "-rw").Lock(ctx))()
	defer held(newRedlock(t, redistest.SharedNodeAddrs(3)).Mutex(name + "-rl").Lock(ctx))()
	ld, err := holder.Election(name+"-e").Campaign(ctx, "leader")
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Resign(ctx)
	p, err := holder.Semaphore(name+"-s", 1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)

	waits := map[string]func() error{
		"Mutex.Lock":          func() error { _, err := waiter.Mutex(name + "-m").Lock(other); return err },
		"FairMutex.Lock":      func() error { _, err := waiter.FairMutex(name + "-m").Lock(other); return err },
		"MultiLock.Lock":      func() error { _, err := waiter.MultiLock(name+"-multi", name+"-free").Lock(other); return err },
		"ReentrantMutex.Lock": func() error { _, err := waiter.ReentrantMutex(name + "-r").Lock(other); return err },
		"RWMutex.Lock":        func() error { _, err := waiter.RWMutex(name + "-rw").Lock(other); return err },
		"RWMutex.RLock":       func() error { _, err := waiter.RWMutex(name + "-rw").RLock(other); return err },
		"Semaphore.Acquire":   func() error { _, err := waiter.Semaphore(name+"-s", 1).Acquire(other, 1); return err },
		"Election.Campaign":   func() error { _, err := waiter.Election(name+"-e").Campaign(other, "b"); return err },
		"RedlockMutex.Lock":   func() error { _, err := rl.Mutex(name + "-rl").Lock(other); return err },
	}
	for call, wait := range waits {
		began := time.Now()
		err := wait()
		took := time.Since(began)
		if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s on a held lock with WithWaitTimeout(%v): %v; want ErrNotObtained and DeadlineExceeded", call, bound, err)
		}
		if took < bound || took > 20*bound {
			t.Errorf("%s gave up after %v; want the %v wait", call, took, bound)
		}
	}
}
