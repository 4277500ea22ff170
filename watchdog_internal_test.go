package dlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A stream of short holds must not wake the watchdog's loop once per
// acquisition: each new lease is due after the loop's own next wake-up.
func TestShortHoldsLeaveTheWatchdogAsleep(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	ctx := context.Background()
	m := c.Mutex(t.Name())
	const holds = 200
	for i := 0; i < holds; i++ {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The first lease, or one tracked just as the loop found nothing to
	// watch, may wake it; one wake-up per hold is what this guards against.
	if n := c.wd.Counts().Pokes; n > holds/10 {
		t.Errorf("the watchdog's loop was woken %d times for %d short holds, want at most %d", n, holds, holds/10)
	}
}

// Err and Done compare the validity deadline when they are called: right
// after a pause (GC, SIGSTOP) the watchdog may not have run yet, and a
// lease past its deadline must not read as held. The deadline is moved
// into the past without telling the watchdog, which then sleeps on.
func TestErrAndDoneCompareTheDeadlineWhenCalled(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	ctx := context.Background()
	pastDeadline := func(l *Lease) { l.s.SetValidUntil(time.Now().Add(-time.Millisecond)) }
	kinds := map[string]func(name string) (*Lease, []*Lease, error){
		"Mutex": func(name string) (*Lease, []*Lease, error) {
			l, err := c.Mutex(name, WithTTL(30*time.Second)).Lock(ctx)
			return l, []*Lease{l}, err
		},
		"ReentrantMutex": func(name string) (*Lease, []*Lease, error) {
			l, err := c.ReentrantMutex(name, WithTTL(30*time.Second)).Lock(WithOwner(ctx, "job"))
			return l, []*Lease{l}, err
		},
		"MultiLock": func(name string) (*Lease, []*Lease, error) {
			l, err := c.MultiLock(name+"-a", name+"-b").With(WithTTL(30 * time.Second)).Lock(ctx)
			if err != nil {
				return nil, nil, err
			}
			return l, l.h.(*multiHolder).parts[:1], nil
		},
	}
	for kind, lock := range kinds {
		t.Run(kind, func(t *testing.T) {
			l, due, err := lock(t.Name())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = l.Unlock(ctx) }()
			if err := l.Err(); err != nil {
				t.Fatalf("Err = %v on a fresh lease", err)
			}
			for _, d := range due {
				pastDeadline(d)
			}
			if err := l.Err(); !errors.Is(err, ErrLockLost) {
				t.Errorf("Err = %v past the validity deadline; want ErrLockLost", err)
			}
			select {
			case <-l.Done():
			default:
				t.Errorf("Done is open past the validity deadline")
			}
		})
	}
}
