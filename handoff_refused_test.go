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

// TestHandOffRefusedStillReleases: a release whose hand-off to a waiter
// Redis refuses (here the holder's user may no longer INCR the fencing
// counter: an ACL changed while it held) frees the lock all the same.
// Unlock says so, with the server's refusal and not as a key conflict, and
// the lease ends released, not lost (a lost lease asks for another Unlock,
// which would find nothing to release). The waiter takes the free lock.
func TestHandOffRefusedStillReleases(t *testing.T) {
	kinds := []struct {
		name string
		key  func(string) string
		lock func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lease, error)
	}{
		{"Mutex", lockKey, func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lease, error) {
			return c.Mutex(name).Lock(ctx)
		}},
		{"FairMutex", lockKey, func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lease, error) {
			return c.FairMutex(name).Lock(ctx)
		}},
		{"ReentrantMutex", reentrantKey, func(ctx context.Context, c *dlock.Client, name string) (*dlock.Lease, error) {
			return c.ReentrantMutex(name).Lock(dlock.WithOwner(ctx, dlock.NewOwnerID()))
		}},
	}
	srv := redistest.Shared(t)
	for _, k := range kinds {
		k := k
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			user, name := "refused-"+uniqueName(t), uniqueName(t)
			holder := newACLClient(t, srv, user, []any{"~*", "&*", "+@all"})
			t.Cleanup(func() { srv.Do(t, "ACL", "DELUSER", user) })
			held, err := k.lock(ctx, holder, name)
			if err != nil {
				t.Fatal(err)
			}
			waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			result := make(chan error, 1)
			go func() {
				l, err := k.lock(waitCtx, newClient(t, srv), name)
				if err == nil {
					err = l.Unlock(ctx)
				}
				result <- err
			}()
			queue := k.key(name) + ":q"
			waitFor(t, 10*time.Second, func() bool { return srv.Do(t, "ZCARD", queue) == int64(1) }, "the waiter in the queue")
			srv.Do(t, "ACL", "SETUSER", user, "-incr")

			err = held.Unlock(ctx)
			switch {
			case err == nil:
				t.Fatal("Unlock handed the lock over; want Redis to refuse the hand-off")
			case errors.Is(err, dlock.ErrKeyConflict):
				t.Errorf("Unlock: %v; want the server's refusal, not a key conflict", err)
			case !strings.Contains(err.Error(), "the lock was released, but its hand-off failed"):
				t.Errorf("Unlock: %v; want it to say the lock was released", err)
			}
			select {
			case <-held.Done():
			default:
				t.Fatal("the lease is not done after an Unlock that released the lock")
			}
			if err := held.Err(); errors.Is(err, dlock.ErrLockLost) {
				t.Errorf("after Unlock, Err = %v; want the lease released, not lost", err)
			}
			if err := held.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("a second Unlock: %v; want ErrNotHeld (already unlocked)", err)
			}
			if err := <-result; err != nil {
				t.Errorf("the waiter: %v; want it to take the free lock", err)
			}
		})
	}
}
