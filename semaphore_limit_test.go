package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestSemaphoreSetPermits: a stored limit serves waiters when raised,
// revokes nothing when lowered, and fails the requests it makes impossible.
func TestSemaphoreSetPermits(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv)
	name := t.Name()
	ctx := testCtx(t)
	srv.Client(t).Del(ctx, semKey(name)+":limit") // from an earlier -count run
	s := a.Semaphore(name, 2)
	p1 := mustAcquire(t, s, 1)
	p2 := mustAcquire(t, s, 1)

	p3 := checkRaiseServesWaiter(ctx, t, srv, s, b, name)
	p := checkLowerHoldsBack(ctx, t, srv, s, b, name, []*dlock.Permits{p1, p2, p3})
	checkLowerFailsWaiter(ctx, t, srv, s, b, name)
	_ = p.Release(ctx)
}

// checkRaiseServesWaiter: raising the limit of s, whose two permits are
// held, serves b's waiter at once, and every process reads the stored
// limit, whatever permits it passes. It returns the waiter's permits.
func checkRaiseServesWaiter(ctx context.Context, t *testing.T, srv *redistest.Server, s *dlock.Semaphore, b *dlock.Client, name string) *dlock.Permits {
	t.Helper()
	got := acquireAsync(ctx, b.Semaphore(name, 2), 1)
	waitSemQueued(t, srv, name, 1)
	raised := time.Now()
	if err := s.SetPermits(ctx, 3); err != nil {
		t.Fatalf("SetPermits(3): %v", err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if d := r.at.Sub(raised); d > 500*time.Millisecond {
		t.Errorf("the waiter was served %v after the limit was raised", d)
	}
	// Every process agrees, whatever permits it passes.
	if n, err := b.Semaphore(name, 10).Available(ctx); err != nil || n != 0 {
		t.Errorf("Available() with the stored limit = %d, %v; want 0", n, err)
	}
	if d := srv.Client(t).PTTL(ctx, semKey(name)+":limit").Val(); d < 24*time.Hour {
		t.Errorf("stored limit PTTL %v, want days", d)
	}
	return r.p
}

// checkLowerHoldsBack: lowering the limit of s to 1 revokes none of held,
// but holds new acquirers of b back until usage drops below it; asking for
// more than the limit fails at once. It returns the permits of the waiter
// served last.
func checkLowerHoldsBack(ctx context.Context, t *testing.T, srv *redistest.Server, s *dlock.Semaphore, b *dlock.Client, name string, held []*dlock.Permits) *dlock.Permits {
	t.Helper()
	if err := s.SetPermits(ctx, 1); err != nil {
		t.Fatalf("SetPermits(1): %v", err)
	}
	for _, p := range held {
		if err := p.Err(); err != nil {
			t.Fatalf("permits revoked by a lower limit: %v", err)
		}
		if _, err := p.TTL(ctx); err != nil {
			t.Fatalf("TTL after the limit was lowered: %v", err)
		}
	}
	if _, err := b.Semaphore(name, 10).TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("TryAcquire over a lowered limit: got %v, want ErrNotObtained", err)
	}
	// More than the limit can never succeed: said at once, queued or not.
	if _, err := b.Semaphore(name, 10).TryAcquire(ctx, 2); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("TryAcquire(2) with limit 1: got %v, want ErrInvalidArgument", err)
	}
	if _, err := b.Semaphore(name, 10).Acquire(ctx, 2); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Acquire(2) with limit 1: got %v, want ErrInvalidArgument", err)
	}
	waiter := acquireAsync(ctx, b.Semaphore(name, 10), 1)
	waitSemQueued(t, srv, name, 1)
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := held[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-waiter:
		t.Fatalf("served while the lowered limit was still used up (err %v)", r.err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := held[2].Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-waiter
	if r.err != nil {
		t.Fatalf("waiter after usage dropped: %v", r.err)
	}
	return r.p
}

// checkLowerFailsWaiter: a waiter of b asking for more than a newly
// lowered limit of s fails promptly, and leaves the queue.
func checkLowerFailsWaiter(ctx context.Context, t *testing.T, srv *redistest.Server, s *dlock.Semaphore, b *dlock.Client, name string) {
	t.Helper()
	if err := s.SetPermits(ctx, 3); err != nil {
		t.Fatal(err)
	}
	big := acquireAsync(ctx, b.Semaphore(name, 10), 3)
	waitSemQueued(t, srv, name, 1)
	lowered := time.Now()
	if err := s.SetPermits(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if r := <-big; !errors.Is(r.err, dlock.ErrInvalidArgument) {
		t.Errorf("waiter for 3 when the limit dropped to 2: got %v, want ErrInvalidArgument", r.err)
	} else if d := r.at.Sub(lowered); d > 2*time.Second {
		t.Errorf("the waiter learnt after %v", d)
	}
	if n := srv.Client(t).Exists(ctx, semKey(name)+":q").Val(); n != 0 {
		t.Error("the failed waiter is still queued")
	}
}

// TestSemaphoreLimitRespectedWhileItChanges: workers of several Clients
// acquire and release while the limit goes up and down by AddPermits, and
// ReleaseN gives part of what they hold back early. The permits out never
// exceed the highest limit in force so far, and once the limit stops
// changing, not the final one either.
func TestSemaphoreLimitRespectedWhileItChanges(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	name := uniqueName(t)
	const start, clients, workers, rounds = 3, 3, 3, 10
	var out, bound, settled atomic.Int64 // settled: the final limit, once it is in force
	bound.Store(start)
	var wg sync.WaitGroup
	acquiredOnce := make(chan struct{}, 1)
	check := func(now int64) {
		if b := bound.Load(); now > b {
			t.Errorf("%d permits out, above every limit in force so far (at most %d)", now, b)
		}
		if f := settled.Load(); f > 0 && now > f {
			t.Errorf("%d permits out, above the limit of %d", now, f)
		}
	}
	for i := 0; i < clients; i++ {
		s := newClient(t, srv, dlock.WithWaiterLease(time.Second)).Semaphore(name, start)
		for j := 0; j < workers; j++ {
			wg.Add(1)
			rng := rand.New(rand.NewSource(int64(i*workers + j)))
			go func() {
				defer wg.Done()
				for r := 0; r < rounds; r++ {
					n := 1 + rng.Intn(2)
					p, err := s.Acquire(ctx, n)
					if err != nil {
						t.Errorf("Acquire(%d): %v", n, err)
						return
					}
					check(out.Add(int64(n)))
					select {
					case acquiredOnce <- struct{}{}:
					default:
					}
					// Hold them a while, as work would.
					time.Sleep(time.Duration(rng.Intn(2000)) * time.Microsecond)
					if n == 2 {
						out.Add(-1) // before ReleaseN: never undercounts what is out
						if err := p.ReleaseN(ctx, 1); err != nil {
							t.Errorf("ReleaseN(1) of 2: %v", err)
						}
					}
					out.Add(-int64(p.N()))
					if err := p.Release(ctx); err != nil {
						t.Errorf("Release: %v", err)
						return
					}
				}
			}()
		}
	}
	workersDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(workersDone)
	}()
	// The limit goes up to 6 and back down to 2 (the largest request fits
	// always), one step each time a worker got permits.
	s := newClient(t, srv).Semaphore(name, start)
	limit := int64(start)
	for _, delta := range []int{1, 1, 1, -1, -1, -1, -1} {
		select {
		case <-acquiredOnce:
		case <-workersDone:
			t.Logf("AddPermits(%d) after the workers were done", delta)
		}
		if delta > 0 {
			bound.Store(limit + 1) // the limit may be in force before AddPermits returns
		}
		got, err := s.AddPermits(ctx, delta)
		if err != nil {
			t.Fatalf("AddPermits(%d): %v", delta, err)
		}
		if limit += int64(delta); int64(got) != limit {
			t.Fatalf("AddPermits(%d) = %d, want %d", delta, got, limit)
		}
	}
	// Permits granted under a higher limit may still be out: the final
	// limit holds once they are back, which a full acquisition shows.
	all, err := s.Acquire(ctx, int(limit))
	if err != nil {
		t.Fatalf("Acquire of the whole lowered limit: %v", err)
	}
	check(out.Add(limit))
	settled.Store(limit)
	out.Add(-limit)
	if err := all.Release(ctx); err != nil {
		t.Fatal(err)
	}
	<-workersDone
}

// TestSemaphoreChangesSentTwiceCountOnce: go-redis sends a command again
// when it lost the reply, and the server may run it twice. An AddPermits
// adds once, and a ReleaseN gives back its permits once.
func TestSemaphoreChangesSentTwiceCountOnce(t *testing.T) {
	t.Parallel()
	c, srv, proxy := clientWithLostReplies(t)
	ctx := testCtx(t)
	name := t.Name()
	s := c.Semaphore(name, 2)
	if _, err := s.AddPermits(ctx, 1); err != nil { // loads the script
		t.Fatal(err)
	}
	var n int
	err := afterLostReply(t, []*redistest.Proxy{proxy}, func() bool { return semLimit(t, srv, name) == "5" }, func() (err error) {
		n, err = s.AddPermits(ctx, 2)
		return err
	})
	if err != nil || n != 5 {
		t.Errorf("AddPermits(2) of 3 sent twice = %d, %v; want 5", n, err)
	}
	if v := semLimit(t, srv, name); v != "5" {
		t.Errorf("stored limit %s after AddPermits(2) of 3 sent twice, want 5", v)
	}

	p := mustAcquire(t, s, 4)
	if err := p.ReleaseN(ctx, 1); err != nil { // loads the script
		t.Fatal(err)
	}
	count := func() string {
		return srv.Client(t).HGet(ctx, semKey(name)+":n", srv.Client(t).ZRange(ctx, semKey(name), 0, 0).Val()[0]).Val()
	}
	want := fmt.Sprintf("1 %d", p.Token())
	if err := afterLostReply(t, []*redistest.Proxy{proxy}, func() bool { return count() == want }, func() error { return p.ReleaseN(ctx, 2) }); err != nil {
		t.Errorf("ReleaseN(2) of 3 sent twice: %v", err)
	}
	if got := count(); got != want || p.N() != 1 {
		t.Errorf("count entry %q and N() %d after ReleaseN(2) of 3 sent twice; want %q and 1", got, p.N(), want)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
