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

func TestSemaphoreBadInputSendsNothing(t *testing.T) {
	srv := redistest.Shared(t)
	rdb, counter := countingClient(t, srv)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t)
	good := c.Semaphore("fine", 3)
	tooMany := dlock.MaxPermits
	tooMany++ // a variable: MaxPermits+1 overflows int on 32-bit platforms
	cases := map[string]func() error{
		"n zero":         func() error { _, err := good.TryAcquire(ctx, 0); return err },
		"n negative":     func() error { _, err := good.Acquire(ctx, -1); return err },
		"n too large":    func() error { _, err := good.Acquire(ctx, tooMany); return err },
		"permits zero":   func() error { _, err := c.Semaphore("x", 0).TryAcquire(ctx, 1); return err },
		"permits < 0":    func() error { _, err := c.Semaphore("x", -3).Acquire(ctx, 1); return err },
		"empty name":     func() error { _, err := c.Semaphore("", 1).Acquire(ctx, 1); return err },
		"brace":          func() error { _, err := c.Semaphore("}ab", 1).TryAcquire(ctx, 1); return err },
		"bad option":     func() error { _, err := c.Semaphore("x", 1, dlock.WithTTL(0)).Acquire(ctx, 1); return err },
		"nil option":     func() error { _, err := c.Semaphore("x", 1, nil).Acquire(ctx, 1); return err },
		"set zero":       func() error { return good.SetPermits(ctx, 0) },
		"set too large":  func() error { return good.SetPermits(ctx, tooMany) },
		"bad available":  func() error { _, err := c.Semaphore("", 1).Available(ctx); return err },
		"bad setpermits": func() error { return c.Semaphore("x", 0).SetPermits(ctx, 2) },
		"add too many":   func() error { _, err := good.AddPermits(ctx, dlock.MaxPermits); return err },
		"add too few":    func() error { _, err := good.AddPermits(ctx, -dlock.MaxPermits); return err },
		"bad addpermits": func() error { _, err := c.Semaphore("", 1).AddPermits(ctx, 1); return err },
	}
	for what, try := range cases {
		if err := try(); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", what, err)
		}
	}
	if n := counter.n.Load(); n != 0 {
		t.Errorf("rejected input sent %d commands to Redis", n)
	}
}

func TestSemaphoreMoreThanTheLimitFailsAtOnce(t *testing.T) {
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	name := t.Name()
	s := c.Semaphore(name, 3)
	start := time.Now()
	if _, err := s.TryAcquire(ctx, 4); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("TryAcquire(4) of 3: got %v, want ErrInvalidArgument", err)
	}
	_, err := s.Acquire(ctx, 4)
	if !errors.Is(err, dlock.ErrInvalidArgument) || errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("Acquire(4) of 3: got %v, want ErrInvalidArgument", err)
	} else if !strings.Contains(err.Error(), "limit is 3") {
		t.Errorf("the error does not say what the limit is: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v to refuse", d)
	}
	if n := srv.Client(t).Exists(ctx, semKey(name)+":q").Val(); n != 0 {
		t.Error("the impossible request was queued")
	}
}

func TestSemaphoreFencingTokensIncrease(t *testing.T) {
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

// TestSemaphoreTryAcquireBehindTheQueueSaysWhy: permits free, but a waiter
// queued first for more than are free: TryAcquire is refused (arrival
// order), and its error says that this, not a lack of permits, is why.
func TestSemaphoreTryAcquireBehindTheQueueSaysWhy(t *testing.T) {
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	name := t.Name()
	ctx := testCtx(t)
	s := c.Semaphore(name, 3)
	held, err := s.Acquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiter := make(chan error, 1)
	go func() {
		p, err := s.Acquire(waitCtx, 2) // one free: queued
		if err == nil {
			_ = p.Release(ctx)
		}
		waiter <- err
	}()
	waitSemQueued(t, srv, name, 1)
	_, err = s.TryAcquire(ctx, 1)
	if !errors.Is(err, dlock.ErrNotObtained) || !strings.Contains(err.Error(), "arrival order") {
		t.Errorf("TryAcquire of a free permit behind a queued waiter: got %v, want ErrNotObtained saying others came first", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waiter; err != nil {
		t.Errorf("queued Acquire: %v", err)
	}
	if _, err := s.TryAcquire(ctx, 4); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("TryAcquire of more than the limit: got %v", err)
	}
}

// semLimit returns the limit stored for semaphore name, "" when none is.
func semLimit(t testing.TB, srv *redistest.Server, name string) string {
	t.Helper()
	return srv.Client(t).Get(context.Background(), semKey(name)+":limit").Val()
}

// patientSem is a semaphore descriptor whose waiters poll only every 10 s,
// so a waiter served within a few seconds was woken by the change that
// served it, not by its poll.
func patientSem(t testing.TB, srv *redistest.Server, name string, permits int) *dlock.Semaphore {
	return newClient(t, srv, dlock.WithWaiterLease(30*time.Second)).Semaphore(name, permits)
}

// awaitServed waits for a queued Acquire's outcome and fails the test unless
// it got its permits within promptly.
func awaitServed(t *testing.T, got <-chan acquired, what string) *dlock.Permits {
	t.Helper()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		t.Cleanup(func() { _ = r.p.Release(context.Background()) })
		return r.p
	case <-time.After(promptly):
		t.Fatalf("%s: not served within %v", what, promptly)
		return nil
	}
}

func TestSemaphoreReleaseN(t *testing.T) {
	srv := redistest.Shared(t)
	rdb, counter := countingClient(t, srv)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t)
	name := uniqueName(t)
	s := c.Semaphore(name, 5)
	p := mustAcquire(t, s, 4)
	token, owner, done := p.Token(), p.Owner(), p.Done()

	before := counter.n.Load()
	for _, n := range []int{0, -1, 5} {
		if err := p.ReleaseN(ctx, n); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("ReleaseN(%d) of 4: got %v, want ErrInvalidArgument", n, err)
		}
	}
	if sent := counter.n.Load() - before; sent != 0 {
		t.Errorf("rejected ReleaseN sent %d commands", sent)
	}

	// Part given back: the rest stay under the same lease.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := p.ReleaseN(cancelled, 1); err != nil { // detached, as Release
		t.Fatalf("ReleaseN(1) of 4 with a cancelled ctx: %v", err)
	}
	if err := p.ReleaseN(ctx, 2); err != nil {
		t.Fatalf("ReleaseN(2) of 3: %v", err)
	}
	if p.N() != 1 || p.Token() != token || p.Owner() != owner || p.Done() != done || p.Err() != nil {
		t.Errorf("after ReleaseN: N() %d, token %d (was %d), owner %q (was %q), Err %v; want 1 permit under the same lease",
			p.N(), p.Token(), token, p.Owner(), owner, p.Err())
	}
	if got, want := srv.Client(t).HGet(ctx, semKey(name)+":n", srv.Client(t).ZRange(ctx, semKey(name), 0, 0).Val()[0]).Val(), fmt.Sprintf("1 %d", token); got != want {
		t.Errorf("count entry %q, want %q", got, want)
	}
	if n, err := s.Available(ctx); err != nil || n != 4 {
		t.Errorf("Available() = %d, %v; want 4", n, err)
	}
	// Operators see what is left.
	list, err := c.List(ctx, name)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for what, infos := range map[string][]dlock.LockInfo{"Inspect": mustInspect(t, c, name), "List": list} {
		info := infoOf(t, infos, dlock.KindSemaphore)
		if len(info.Holders) != 1 || info.Holders[0].Permits != 1 || info.Holders[0].Token != token || info.Holders[0].Owner != owner {
			t.Errorf("%s holders %+v, want the owner with 1 permit and token %d", what, info.Holders, token)
		}
	}
	if err := p.Extend(ctx, time.Minute); err != nil {
		t.Errorf("Extend after ReleaseN: %v", err)
	}
	if d, err := p.TTL(ctx); err != nil || d < 50*time.Second {
		t.Errorf("TTL() after ReleaseN and Extend = %v, %v", d, err)
	}

	// ReleaseN(N()) is Release.
	if err := p.ReleaseN(ctx, 1); err != nil {
		t.Fatalf("ReleaseN(1) of 1: %v", err)
	}
	select {
	case <-done:
	default:
		t.Error("Done not closed by ReleaseN of every permit")
	}
	if err := p.Err(); !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Err() after ReleaseN of every permit = %v, want ErrNotHeld only", err)
	}
	if n := srv.Client(t).Exists(ctx, semKey(name), semKey(name)+":n").Val(); n != 0 {
		t.Errorf("holder keys left after every permit was released")
	}
	if err := p.ReleaseN(ctx, 1); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("ReleaseN after the end: got %v, want ErrNotHeld", err)
	}
	if err := p.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release after ReleaseN of every permit: got %v, want ErrNotHeld", err)
	}

	// Several at once on one Permits: each gives back its own.
	q := mustAcquire(t, s, 5)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := q.ReleaseN(ctx, 1); err != nil {
				t.Errorf("concurrent ReleaseN(1): %v", err)
			}
			_ = q.N()
		}()
	}
	wg.Wait()
	if q.N() != 1 {
		t.Errorf("N() = %d after four ReleaseN(1) of 5", q.N())
	}
	if n, err := s.Available(ctx); err != nil || n != 4 {
		t.Errorf("Available() = %d, %v; want 4", n, err)
	}
	if err := q.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// ReleaseN racing Release, renewals (a 300 ms TTL renews every 100 ms),
// Extend and TTL on one Permits: the permits are never taken for lost, and
// the other holder's are untouched.
func TestSemaphoreReleaseNBesideReleaseRenewalExtendAndTTL(t *testing.T) {
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(300*time.Millisecond))
	ctx := testCtx(t)
	name := uniqueName(t)
	s := c.Semaphore(name, 8)
	other := mustAcquire(t, s, 1)
	defer other.Release(ctx)
	for i := 0; i < 40; i++ {
		p := mustAcquire(t, s, 6)
		var wg sync.WaitGroup
		for j := 0; j < 3; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := p.ReleaseN(ctx, 1); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
					t.Errorf("ReleaseN: %v", err)
				}
			}()
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := p.Extend(ctx, 300*time.Millisecond); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("Extend: %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := p.TTL(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("TTL: %v", err)
			}
		}()
		time.Sleep(time.Duration(i%4) * 40 * time.Millisecond) // some rounds span a renewal
		if err := p.Release(ctx); err != nil {
			t.Errorf("round %d: Release: %v", i, err)
		}
		wg.Wait()
		if err := p.Err(); errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("round %d: permits taken for lost: %v", i, err)
		}
	}
	if n, err := s.Available(ctx); err != nil || n != 7 {
		t.Errorf("Available = %d, %v; want 7", n, err)
	}
	if err := other.Err(); err != nil {
		t.Errorf("other holder: %v", err)
	}
}

// TestSemaphoreReleaseNServesWaitersInOrder: permits given back by ReleaseN
// go to the waiters at once, in arrival order, stopping at the first that
// does not fit, as after Release.
func TestSemaphoreReleaseNServesWaitersInOrder(t *testing.T) {
	srv := redistest.Shared(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	name := uniqueName(t)
	p := mustAcquire(t, c.Semaphore(name, 4), 4)
	var waiters []<-chan acquired
	for i, n := range []int{2, 1, 2} {
		waiters = append(waiters, acquireAsync(ctx, patientSem(t, srv, name, 4), n))
		waitSemQueued(t, srv, name, int64(i+1))
	}
	// Each ReleaseN grants in its script: the queue tells who was served
	// as soon as it returns.
	for i, step := range []struct{ n, queued int }{
		{1, 3}, // 1 free: the first wants 2
		{1, 2}, // 2 free: the first's 2
		{1, 1}, // 1 free: the second's 1
		{1, 1}, // every permit back (Release), 1 free: the third wants 2
	} {
		if err := p.ReleaseN(ctx, step.n); err != nil {
			t.Fatalf("step %d: ReleaseN(%d) of %d: %v", i, step.n, p.N(), err)
		}
		if n := srv.Client(t).ZCard(ctx, semKey(name)+":q").Val(); n != int64(step.queued) {
			t.Fatalf("step %d: %d waiters still queued, want %d", i, n, step.queued)
		}
	}
	if p.Err() == nil {
		t.Error("the permits are still held after the last ReleaseN")
	}
	first := awaitServed(t, waiters[0], "waiter 1")
	second := awaitServed(t, waiters[1], "waiter 2")
	if err := first.ReleaseN(ctx, 1); err != nil { // 2 free: the third's 2
		t.Fatal(err)
	}
	third := awaitServed(t, waiters[2], "waiter 3")
	if !(p.Token() < first.Token() && first.Token() < second.Token() && second.Token() < third.Token()) {
		t.Errorf("tokens %d, %d, %d after %d: the waiters were not served in arrival order",
			first.Token(), second.Token(), third.Token(), p.Token())
	}
}
