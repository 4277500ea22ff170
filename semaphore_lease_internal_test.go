package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/wait"
)

// An acquisition's first grant gets the Lease made with the acquisition; a
// grant that expired before its claim spends it, and the next grant gets a
// new one, so no Lease is started twice.
func TestSemaphoreAcquisitionLeases(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	ctx := context.Background()
	s := c.Semaphore(t.Name(), 1)
	grant := func(a *semAcquisition) (string, wait.Result) {
		t.Helper()
		owner, err := ownerid.New("")
		if err != nil {
			t.Fatal(err)
		}
		r, err := a.attempt(ctx, owner, false)
		if err != nil || !r.Granted {
			t.Fatalf("attempt: granted %v, %v", r.Granted, err)
		}
		return owner, r
	}

	first := &semAcquisition{s: s, n: 1}
	owner, r := grant(first)
	l, err := first.makeLease(ctx, &s.cfg, owner, r, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if l != &first.lease {
		t.Error("the first grant's Lease is not the acquisition's own")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	again := &semAcquisition{s: s, n: 1}
	owner, err = ownerid.New("")
	if err != nil {
		t.Fatal(err)
	}
	// A grant of 100 ms heard a second late, under an owner that holds
	// nothing: its claim finds it gone.
	stale := wait.Result{Granted: true, Fence: 1, PTTL: 100 * time.Millisecond}
	if _, err := again.makeLease(ctx, &s.cfg, owner, stale, time.Now().Add(-time.Second)); !errors.Is(err, errGrantExpired) {
		t.Fatalf("the lease of an expired grant: %v, want errGrantExpired", err)
	}
	owner, r = grant(again)
	l, err = again.makeLease(ctx, &s.cfg, owner, r, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if l == &again.lease {
		t.Error("the grant after an expired one reuses the spent Lease")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
