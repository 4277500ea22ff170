package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

var doTests = []test{
	{"RunsUnderTheLockAndReleases", testDoRunsUnderTheLockAndReleases},
	{"NotObtained", testDoNotObtained},
}

func testDoRunsUnderTheLockAndReleases(t *testing.T, newClient NewClientFunc) {
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv)
	rdb := inspector(t, srv)
	name := lockName(t)
	ctx := testCtx(t)
	errFn := errors.New("fn failed")
	ran := false
	err := a.Do(ctx, name, func(ctx context.Context) error {
		ran = true
		if _, err := b.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("TryLock inside Do: got %v, want ErrNotObtained", err)
		}
		return errFn
	})
	if !ran {
		t.Fatal("Do did not run fn")
	}
	if !errors.Is(err, errFn) {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
	if n := leftovers(t, rdb, name); n != 0 {
		t.Errorf("Do left %d keys: it did not release the lock", n)
	}
}

func testDoNotObtained(t *testing.T, newClient NewClientFunc) {
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv)
	name := lockName(t)
	held := mustLock(t, a, name)
	defer mustUnlock(t, held)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := b.Do(ctx, name, func(context.Context) error {
		t.Error("fn ran while another client held the lock")
		return nil
	})
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Do: got %v, want ErrNotObtained and context.DeadlineExceeded", err)
	}
}
