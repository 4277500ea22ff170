package dlock_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// async is an acquisition running in its own goroutine. When the test ends
// its context is cancelled, and what it obtained is released.
type async[T any] struct {
	done chan struct{}
	got  T
	err  error
}

// goAcquire runs acquire in a goroutine; release frees what it obtained.
func goAcquire[T any](t *testing.T, acquire func(context.Context) (T, error), release func(T)) *async[T] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &async[T]{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.got, a.err = acquire(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-a.done:
			if a.err == nil {
				release(a.got)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("an acquisition did not return within 30s of its context's end")
		}
	})
	return a
}

// await waits for the acquisition to succeed, failing after limit.
func (a *async[T]) await(t *testing.T, limit time.Duration, what string) T {
	t.Helper()
	select {
	case <-a.done:
		if a.err != nil {
			t.Fatalf("%s: %v", what, a.err)
		}
		return a.got
	case <-time.After(limit):
		t.Fatalf("%s: still waiting after %v", what, limit)
		var zero T
		return zero
	}
}

// wait waits for the acquisition to return, failing after limit, and
// returns what it returned.
func (a *async[T]) wait(t *testing.T, limit time.Duration) (T, error) {
	t.Helper()
	select {
	case <-a.done:
		return a.got, a.err
	case <-time.After(limit):
		t.Fatalf("an acquisition still waiting after %v", limit)
		var zero T
		return zero, nil
	}
}

// pending reports whether the acquisition is still waiting.
func (a *async[T]) pending() bool {
	select {
	case <-a.done:
		return false
	default:
		return true
	}
}

func unlockLease(l *dlock.Lease)      { _ = l.Unlock(context.Background()) }
func releasePermits(p *dlock.Permits) { _ = p.Release(context.Background()) }
func goLock(t *testing.T, lock func(context.Context) (*dlock.Lease, error)) *async[*dlock.Lease] {
	t.Helper()
	return goAcquire(t, lock, unlockLease)
}

// infoOf returns the LockInfo of kind in infos, failing the test without one.
func infoOf(t *testing.T, infos []dlock.LockInfo, kind dlock.Kind) dlock.LockInfo {
	t.Helper()
	for _, info := range infos {
		if info.Kind == kind {
			return info
		}
	}
	t.Fatalf("no %s in %+v", kind, infos)
	return dlock.LockInfo{}
}

// waitWaiters waits until Inspect shows n waiters of kind on name.
func waitWaiters(t *testing.T, c *dlock.Client, name string, kind dlock.Kind, n int) {
	t.Helper()
	waitFor(t, 10*time.Second, func() bool {
		infos, err := c.Inspect(context.Background(), name)
		if err != nil {
			t.Fatalf("Inspect(%q): %v", name, err)
		}
		for _, info := range infos {
			if info.Kind == kind {
				return len(info.Waiters) == n
			}
		}
		return n == 0
	}, fmt.Sprintf("%d %s waiters on %q", n, kind, name))
}

var ownerID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// checkTTL checks that a remaining time is positive and at most limit.
func checkTTL(t *testing.T, what string, d, limit time.Duration) {
	t.Helper()
	if d <= 0 || d > limit {
		t.Errorf("%s = %v, want in (0, %v]", what, d, limit)
	}
}
