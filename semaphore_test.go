package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func init() {
	registerChildMode("sem-hold", func(ctx context.Context, c *dlock.Client, name string, ready func()) error {
		_, err := c.Semaphore(name, 2, dlock.WithTTL(time.Second)).Acquire(ctx, 2)
		if err == nil {
			ready()
		}
		return err
	})
	registerChildMode("sem-wait", func(ctx context.Context, c *dlock.Client, name string, ready func()) error {
		go func() {
			_, _ = c.Semaphore(name, 2, dlock.WithWaiterLease(300*time.Millisecond)).Acquire(ctx, 2)
		}()
		ready() // the parent waits for the queue entry itself
		return nil
	})
}

// semKey is the key of semaphore name's holders under the default prefix;
// its other keys add a suffix (":n", ":limit", ":fence", ":q", ":w").
func semKey(name string) string { return lockKey(name) + ":sem" }

// waitSemQueued waits until n owners are queued for semaphore name.
func waitSemQueued(t testing.TB, srv *redistest.Server, name string, n int64) {
	t.Helper()
	rdb := srv.Client(t)
	waitFor(t, 10*time.Second, func() bool {
		return rdb.ZCard(context.Background(), semKey(name)+":q").Val() == n
	}, fmt.Sprintf("%d waiters queued on semaphore %q", n, name))
}

// mustAcquire takes n permits of s or fails the test.
func mustAcquire(t testing.TB, s *dlock.Semaphore, n int) *dlock.Permits {
	t.Helper()
	p, err := s.Acquire(testCtx(t), n)
	if err != nil {
		t.Fatalf("Acquire(%d) of %q: %v", n, s.Name(), err)
	}
	return p
}

// acquireAsync acquires n permits in a goroutine and reports the outcome.
type acquired struct {
	p   *dlock.Permits
	err error
	at  time.Time
}

func acquireAsync(ctx context.Context, s *dlock.Semaphore, n int) <-chan acquired {
	got := make(chan acquired, 1)
	go func() {
		p, err := s.Acquire(ctx, n)
		got <- acquired{p, err, time.Now()}
	}()
	return got
}

// TestSemaphoreNeverMoreThanLimit has several Clients (as separate processes
// would be) and goroutines acquire random numbers of permits, and tracks
// what is out in-process: it never exceeds the limit, and reaches it.
func TestSemaphoreNeverMoreThanLimit(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	const limit, clients, workers, rounds = 5, 3, 4, 12
	name := t.Name()
	ctx := testCtx(t)

	var out, maxOut atomic.Int64
	var lastToken atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		c := newClient(t, srv)
		for j := 0; j < workers; j++ {
			wg.Add(1)
			rng := rand.New(rand.NewSource(int64(i*workers + j)))
			go func() {
				defer wg.Done()
				s := c.Semaphore(name, limit)
				for r := 0; r < rounds; r++ {
					n := 1 + rng.Intn(3)
					p, err := s.Acquire(ctx, n)
					if err != nil {
						t.Errorf("Acquire(%d): %v", n, err)
						return
					}
					now := out.Add(int64(n))
					for {
						m := maxOut.Load()
						if now <= m || maxOut.CompareAndSwap(m, now) {
							break
						}
					}
					if now > limit {
						t.Errorf("%d permits out, limit %d", now, limit)
					}
					if tok := p.Token(); tok <= 0 {
						t.Errorf("token %d", tok)
					} else {
						for {
							last := lastToken.Load()
							if tok <= last || lastToken.CompareAndSwap(last, tok) {
								break
							}
						}
					}
					time.Sleep(time.Duration(rng.Intn(2000)) * time.Microsecond)
					out.Add(-int64(n)) // before Release: never undercounts what is out
					if err := p.Release(ctx); err != nil {
						t.Errorf("Release: %v", err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if m := maxOut.Load(); m != limit {
		t.Errorf("at most %d permits were out at once; want the limit, %d, reached (and never exceeded)", m, limit)
	}
	rdb := srv.Client(t)
	if n := rdb.Exists(ctx, semKey(name), semKey(name)+":n", semKey(name)+":q", semKey(name)+":w").Val(); n != 0 {
		t.Errorf("%d semaphore keys left behind", n)
	}
}

func TestSemaphoreKeysAndPermits(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(10*time.Second), dlock.WithOwnerInfo("worker-7"))
	name := t.Name()
	ctx := testCtx(t)
	s := c.Semaphore(name, 3)
	if s.Name() != name {
		t.Errorf("Name() = %q", s.Name())
	}
	p := mustAcquire(t, s, 2)
	if p.N() != 2 || p.Name() != name {
		t.Errorf("N() = %d, Name() = %q", p.N(), p.Name())
	}
	rdb := srv.Client(t)
	// The only holder is held in the solo form: "<owner> <permits> <token>".
	solo := rdb.Get(ctx, semKey(name)).Val()
	suffix := fmt.Sprintf(";worker-7 2 %d", p.Token())
	if !strings.HasSuffix(solo, suffix) {
		t.Fatalf("holders = %q, want an owner value ending in %q", solo, suffix)
	}
	owner := strings.TrimSuffix(solo, fmt.Sprintf(" 2 %d", p.Token()))
	for _, k := range []string{semKey(name), semKey(name) + ":fence"} {
		if d := rdb.PTTL(ctx, k).Val(); d < 9*time.Second {
			t.Errorf("%s: PTTL %v, want at least the 10s TTL", k, d)
		}
	}
	if d, err := p.TTL(ctx); err != nil || d <= 9*time.Second || d > 10*time.Second {
		t.Errorf("TTL() = %v, %v; want about 10s", d, err)
	}
	if err := p.Extend(ctx, 20*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if d, err := p.TTL(ctx); err != nil || d <= 19*time.Second {
		t.Errorf("TTL() after Extend = %v, %v; want about 20s", d, err)
	}
	if n, err := s.Available(ctx); err != nil || n != 1 {
		t.Errorf("Available() = %d, %v; want 1", n, err)
	}
	if _, err := s.TryAcquire(ctx, 2); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("TryAcquire(2) with 1 free: got %v, want ErrNotObtained", err)
	}
	q, err := s.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatalf("TryAcquire(1) with 1 free: %v", err)
	}
	if q.Token() <= p.Token() {
		t.Errorf("token %d after %d", q.Token(), p.Token())
	}
	// A second holder: both are in the zset form, with their counts.
	holders := rdb.ZRange(ctx, semKey(name), 0, -1).Val()
	if len(holders) != 2 || !slices.Contains(holders, owner) {
		t.Fatalf("holders = %v, want two, %q among them", holders, owner)
	}
	if got, want := rdb.HGet(ctx, semKey(name)+":n", owner).Val(), fmt.Sprintf("2 %d", p.Token()); got != want {
		t.Errorf("count entry %q, want %q", got, want)
	}
	for _, k := range []string{semKey(name), semKey(name) + ":n"} {
		if d := rdb.PTTL(ctx, k).Val(); d < 9*time.Second {
			t.Errorf("%s: PTTL %v, want at least the 10s TTL", k, d)
		}
	}
	// Release with a cancelled context still releases.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := q.Release(cancelled); err != nil {
		t.Fatalf("Release with a cancelled ctx: %v", err)
	}
	if err := q.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Release: got %v, want ErrNotHeld", err)
	}
	if err := q.Err(); !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Err() after Release = %v, want ErrNotHeld only", err)
	}
	select {
	case <-q.Done():
	default:
		t.Error("Done not closed after Release")
	}
	if err := p.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if n := rdb.Exists(ctx, semKey(name), semKey(name)+":n").Val(); n != 0 {
		t.Errorf("holder keys left after every permit was released")
	}
	if n, err := s.Available(ctx); err != nil || n != 3 {
		t.Errorf("Available() = %d, %v; want 3", n, err)
	}
}

// TestSemaphoreFIFONoStarvation: a large request that arrived first is
// served before smaller ones that would fit earlier.
func TestSemaphoreFIFONoStarvation(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	a, b, c := newClient(t, srv), newClient(t, srv), newClient(t, srv)
	held := mustAcquire(t, a.Semaphore(name, 4), 3) // 1 free

	large := acquireAsync(ctx, b.Semaphore(name, 4), 4)
	waitSemQueued(t, srv, name, 1)
	if _, err := c.Semaphore(name, 4).TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryAcquire(1) barged past a queued request: %v", err)
	}
	small := acquireAsync(ctx, c.Semaphore(name, 4), 1)
	waitSemQueued(t, srv, name, 2)
	select {
	case r := <-small:
		t.Fatalf("the small request was served before the large one that came first (err %v)", r.err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-large
	if r.err != nil {
		t.Fatalf("large Acquire: %v", r.err)
	}
	select {
	case r := <-small:
		t.Fatalf("the small request was served while the large one held every permit (err %v)", r.err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := r.p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	s := <-small
	if s.err != nil {
		t.Fatalf("small Acquire: %v", s.err)
	}
	if s.p.Token() <= r.p.Token() {
		t.Errorf("token %d after %d", s.p.Token(), r.p.Token())
	}
	_ = s.p.Release(ctx)
}

func TestSemaphoreReleaseWakesWaiterPromptly(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv)
	name := t.Name()
	ctx := testCtx(t)
	p := mustAcquire(t, a.Semaphore(name, 2), 2)
	got := acquireAsync(ctx, b.Semaphore(name, 2), 1)
	waitSemQueued(t, srv, name, 1)
	released := time.Now()
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("waiting Acquire: %v", r.err)
	}
	defer r.p.Release(ctx)
	// Waiters poll only every second: far quicker means the release woke it.
	if d := r.at.Sub(released); d > 500*time.Millisecond {
		t.Errorf("the waiter got its permit %v after the release; want a few ms", d)
	}
	if r.p.Token() <= p.Token() {
		t.Errorf("token %d after %d", r.p.Token(), p.Token())
	}
	// The grant's short claim window is renewed to the full TTL at once.
	waitFor(t, 5*time.Second, func() bool {
		d, err := r.p.TTL(ctx)
		return err == nil && d > 20*time.Second
	}, "the granted permits to be renewed to their full TTL")
}

func TestSemaphorePermitsRenewedPastSeveralTTLs(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	// Renewed every 200ms; 400ms of slack absorb a loaded machine.
	c := newClient(t, srv, dlock.WithTTL(600*time.Millisecond))
	other := newClient(t, srv)
	name := t.Name()
	ctx := testCtx(t)
	p := mustAcquire(t, c.Semaphore(name, 3), 3)
	deadline := time.Now().Add(1800 * time.Millisecond) // three TTLs
	for time.Now().Before(deadline) {
		select {
		case <-p.Done():
			t.Fatalf("permits lost while renewing: %v", p.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if _, err := other.Semaphore(name, 3).TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("another owner got a permit while all were renewed: %v", err)
		}
	}
	if err := p.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func TestSemaphoreFencingTokensIncrease(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv)
	rdb := srv.Client(t)
	name := t.Name()
	ctx := testCtx(t)
	var last int64
	for i := 0; i < 20; i++ {
		if i == 10 {
			rdb.Del(ctx, semKey(name)+":fence") // as if it had expired
		}
		p := mustAcquire(t, a.Semaphore(name, 2), 1)
		q := mustAcquire(t, b.Semaphore(name, 2), 1)
		if p.Token() <= last || q.Token() <= p.Token() {
			t.Fatalf("tokens %d, %d after %d", p.Token(), q.Token(), last)
		}
		last = q.Token()
		// A hand-off issues a larger token too.
		got := acquireAsync(ctx, b.Semaphore(name, 2), 1)
		waitSemQueued(t, srv, name, 1)
		_ = p.Release(ctx)
		r := <-got
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.p.Token() <= last {
			t.Fatalf("handed-off token %d after %d", r.p.Token(), last)
		}
		last = r.p.Token()
		_ = q.Release(ctx)
		_ = r.p.Release(ctx)
	}
}

func TestSemaphoreCancelledAcquireLeavesNothingQueued(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	a, b := newClient(t, srv), newClient(t, srv)
	name := t.Name()
	p := mustAcquire(t, a.Semaphore(name, 1), 1)

	ctx, cancel := context.WithCancel(context.Background())
	got := acquireAsync(ctx, b.Semaphore(name, 1), 1)
	waitSemQueued(t, srv, name, 1)
	cancel()
	r := <-got
	if !errors.Is(r.err, dlock.ErrNotObtained) || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled Acquire: got %v, want ErrNotObtained and context.Canceled", r.err)
	}
	rdb := srv.Client(t)
	bg := context.Background()
	waitFor(t, 5*time.Second, func() bool {
		return rdb.Exists(bg, semKey(name)+":q", semKey(name)+":w").Val() == 0
	}, "the cancelled waiter to leave the queue")
	if err := p.Release(bg); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(bg, semKey(name)).Val(); n != 0 {
		t.Errorf("permits were granted to the cancelled waiter")
	}

	// A deadline ends a wait the same way.
	held := mustAcquire(t, a.Semaphore(name, 1), 1)
	defer held.Release(bg)
	dctx, dcancel := context.WithTimeout(bg, 150*time.Millisecond)
	defer dcancel()
	if _, err := b.Semaphore(name, 1).Acquire(dctx, 1); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire past its deadline: got %v, want ErrNotObtained and DeadlineExceeded", err)
	}
}

// TestSemaphoreSeparateFromMutex: a lock and a semaphore of one name do not
// share keys.
func TestSemaphoreSeparateFromMutex(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	lease := mustLock(t, c, t.Name())
	defer lease.Unlock(ctx)
	p, err := c.Semaphore(t.Name(), 1).TryAcquire(ctx, 1)
	if err != nil {
		t.Fatalf("semaphore of a locked name: %v", err)
	}
	defer p.Release(ctx)
	if v := srv.Client(t).Type(ctx, lockKey(t.Name())).Val(); v != "string" {
		t.Errorf("the lock key is a %s", v)
	}
}
