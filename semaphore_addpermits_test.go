package dlock_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestSemaphoreAddPermits(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	name := uniqueName(t)
	s := c.Semaphore(name, 2)

	// The first addition starts from the descriptor's permits, and stores
	// the result for every process, whatever permits it passes.
	if n, err := s.AddPermits(ctx, 3); err != nil || n != 5 {
		t.Fatalf("AddPermits(3) of 2 = %d, %v; want 5", n, err)
	}
	if n, err := c.Semaphore(name, 9).Available(ctx); err != nil || n != 5 {
		t.Errorf("Available() after AddPermits = %d, %v; want 5", n, err)
	}
	if d := srv.Client(t).PTTL(ctx, semKey(name)+":limit").Val(); d < 24*time.Hour {
		t.Errorf("stored limit PTTL %v, want days, as SetPermits's", d)
	}
	if n, err := c.Semaphore(name, 9).AddPermits(ctx, -4); err != nil || n != 1 {
		t.Fatalf("AddPermits(-4) of 5 = %d, %v; want 1", n, err)
	}
	if n, err := s.AddPermits(ctx, 0); err != nil || n != 1 {
		t.Errorf("AddPermits(0) = %d, %v; want 1", n, err)
	}
	// Out of range on the server: refused, and nothing changes.
	refused := func(delta int, limit string) {
		t.Helper()
		n, err := s.AddPermits(ctx, delta)
		if !errors.Is(err, dlock.ErrInvalidArgument) || n != 0 {
			t.Errorf("AddPermits(%d) of %s = %d, %v; want ErrInvalidArgument", delta, limit, n, err)
		} else if !strings.Contains(err.Error(), "limit is "+limit) {
			t.Errorf("AddPermits(%d): the error does not say what the limit is: %v", delta, err)
		}
		if v := semLimit(t, srv, name); v != limit {
			t.Errorf("stored limit %q after a refused AddPermits(%d), want %s", v, delta, limit)
		}
	}
	refused(-1, "1")
	if n, err := s.AddPermits(ctx, dlock.MaxPermits-1); err != nil || n != dlock.MaxPermits {
		t.Errorf("AddPermits up to MaxPermits = %d, %v", n, err)
	}
	refused(1, fmt.Sprint(dlock.MaxPermits))
	if err := s.SetPermits(ctx, 3); err != nil {
		t.Fatal(err)
	}

	// Lowering revokes nothing and holds new acquirers back until usage
	// is below the new limit.
	held := []*dlock.Permits{mustAcquire(t, s, 1), mustAcquire(t, s, 2)}
	if n, err := s.AddPermits(ctx, -1); err != nil || n != 2 {
		t.Fatalf("AddPermits(-1) of 3 = %d, %v", n, err)
	}
	for _, p := range held {
		if err := p.Err(); err != nil {
			t.Fatalf("permits revoked by a lower limit: %v", err)
		}
	}
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("TryAcquire with 2 held of a limit lowered to 2: got %v, want ErrNotObtained", err)
	}

	// A waiter asking for more than the lowered limit fails at once.
	big := acquireAsync(ctx, patientSem(t, srv, name, 3), 2)
	waitSemQueued(t, srv, name, 1)
	if n, err := s.AddPermits(ctx, -1); err != nil || n != 1 {
		t.Fatalf("AddPermits(-1) of 2 = %d, %v", n, err)
	}
	select {
	case r := <-big:
		if !errors.Is(r.err, dlock.ErrInvalidArgument) {
			t.Errorf("waiter for 2 when the limit dropped to 1: got %v, want ErrInvalidArgument", r.err)
		}
	case <-time.After(promptly):
		t.Fatalf("the waiter for 2 was not told within %v that the limit dropped to 1", promptly)
	}
	if n := srv.Client(t).Exists(ctx, semKey(name)+":q").Val(); n != 0 {
		t.Error("the failed waiter is still queued")
	}
	if err := held[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSemaphoreAddPermitsServesWaitersInOrder: raising the limit serves the
// waiters at once, in arrival order, stopping at the first that does not
// fit, as a release does.
func TestSemaphoreAddPermitsServesWaitersInOrder(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	name := uniqueName(t)
	s := c.Semaphore(name, 2)
	p := mustAcquire(t, s, 2)
	defer p.Release(ctx)
	var waiters []<-chan acquired
	for i, n := range []int{1, 2, 1} {
		waiters = append(waiters, acquireAsync(ctx, patientSem(t, srv, name, 2), n))
		waitSemQueued(t, srv, name, int64(i+1))
	}
	// Each addition grants in its script: the queue tells who was served
	// as soon as it returns.
	for i, step := range []struct{ delta, queued int }{
		{1, 2}, // 1 free: the first waiter's 1
		{1, 2}, // 1 free: the second wants 2, and the third waits behind it
		{1, 1}, // 2 free: the second's 2, and nothing left for the third
		{1, 0}, // the third's 1
	} {
		if _, err := s.AddPermits(ctx, step.delta); err != nil {
			t.Fatalf("step %d: AddPermits: %v", i, err)
		}
		if n := srv.Client(t).ZCard(ctx, semKey(name)+":q").Val(); n != int64(step.queued) {
			t.Fatalf("step %d: %d waiters still queued, want %d", i, n, step.queued)
		}
	}
	var tokens []int64
	for i, w := range waiters {
		tokens = append(tokens, awaitServed(t, w, fmt.Sprintf("waiter %d", i+1)).Token())
	}
	if !slices.IsSorted(tokens) {
		t.Errorf("tokens %v: the waiters were not served in arrival order", tokens)
	}
}

// TestSemaphoreAddPermitsConcurrent: additions from several Clients at once
// are atomic: each returns a different limit, and all of them count.
func TestSemaphoreAddPermitsConcurrent(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	name := uniqueName(t)
	const base, clients, workers, rounds = 3, 3, 4, 5
	var mu sync.Mutex
	seen := map[int]bool{}
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		s := newClient(t, srv).Semaphore(name, base)
		for j := 0; j < workers; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < rounds; r++ {
					n, err := s.AddPermits(ctx, 1)
					if err != nil {
						t.Errorf("AddPermits(1): %v", err)
						return
					}
					mu.Lock()
					if seen[n] {
						t.Errorf("two additions returned %d", n)
					}
					seen[n] = true
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	const total = clients * workers * rounds
	for n := base + 1; n <= base+total; n++ {
		if !seen[n] {
			t.Errorf("no addition returned %d", n)
		}
	}
	if v := semLimit(t, srv, name); v != fmt.Sprint(base+total) {
		t.Errorf("stored limit %s after %d additions of 1 to %d", v, total, base)
	}
}

// A sorted set without an expiry at :sem:calls is no key of dlock's (it
// always sets one): AddPermits must report ErrKeyConflict and leave it
// alone, as sem_check does for every other key.
func TestSemaphoreAddPermitsForeignCallsZset(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	name := uniqueName(t)
	calls := semKey(name) + ":calls"
	rdb.ZAdd(ctx, calls, redis.Z{Score: 1, Member: "someone else's"})
	defer rdb.Del(ctx, calls)
	_, err := c.Semaphore(name, 2).AddPermits(ctx, 1)
	if !errors.Is(err, dlock.ErrKeyConflict) {
		t.Errorf("AddPermits with a foreign zset at :calls: got %v, want ErrKeyConflict", err)
	}
	if d := rdb.PTTL(ctx, calls).Val(); d != -1 {
		t.Errorf("the foreign zset was given an expiry (%v)", d)
	}
	if m := rdb.ZRange(ctx, calls, 0, -1).Val(); len(m) != 1 || m[0] != "someone else's" {
		t.Errorf("the foreign zset holds %q now", m)
	}
	if v := semLimit(t, srv, name); v != "" {
		t.Errorf("a limit (%s) was stored despite the conflict", v)
	}
}
