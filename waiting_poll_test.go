package dlock_test

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A holder that stops renewing frees its permits by expiry, which nobody
// announces: a waiter's poll, which finds every permit held while that
// holder lives, must then prune it and serve the queue. A longer hold keeps
// the holders key alive, so only the poll's own check of the holders'
// expiries lets the waiter in.
func TestSemaphoreWaiterPollTakesExpiredPermits(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	name := t.Name()
	a, b := newClient(t, srv), newClient(t, srv)
	long := mustAcquire(t, a.Semaphore(name, 2), 1)
	defer func() { _ = long.Release(ctx) }()
	mustAcquire(t, a.Semaphore(name, 2, dlock.WithTTL(500*time.Millisecond), dlock.WithAutoRenew(false)), 1)
	p, err := b.Semaphore(name, 2).Acquire(ctx, 1)
	if err != nil {
		t.Fatalf("Acquire after the holder's expiry: %v", err)
	}
	if err := p.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
}
