package dlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A grant from the queue that leaves its waiter the only holder, with no
// limit stored, is written in the solo form (sem_grant_queued in
// sem_lib.lua), as the fast path takes a free semaphore. These tests hand
// permits through Redis, between Clients (a Client's own acquisitions of
// every permit pass them on with sem_transfer.lua).

// wantSemSolo fails unless p holds semaphore name alone, in the solo form.
func wantSemSolo(t *testing.T, srv *redistest.Server, name string, p *dlock.Permits, when string) {
	t.Helper()
	rdb := srv.Client(t)
	v, err := rdb.Get(context.Background(), semKey(name)).Result()
	if err != nil || !strings.HasPrefix(v, p.Owner()) || rdb.PTTL(context.Background(), semKey(name)).Val() <= 0 {
		t.Fatalf("%s: holders key = %q, %v; want the solo form of %s", when, v, err, p.Owner())
	}
}

// goSemAcquire acquires n permits of a Semaphore of permits named name on
// a Client of its own, in a goroutine.
func goSemAcquire(t *testing.T, srv *redistest.Server, name string, permits, n int, opts ...dlock.Option) *async[*dlock.Permits] {
	t.Helper()
	s := newClient(t, srv, opts...).Semaphore(name, permits)
	return goAcquire(t, func(ctx context.Context) (*dlock.Permits, error) { return s.Acquire(ctx, n) }, releasePermits)
}

// After a hand-off of every permit through the queue, the waiter holds in
// the solo form, with a higher token; its TTL, Extend, renewal, Available
// and Inspect read the string, and its Release hands the permits on to the
// next waiter, solo too.
func TestSemaphoreQueueGrantOfEveryPermitIsSolo(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	name := t.Name()
	ttl := 900 * time.Millisecond
	s := newClient(t, srv).Semaphore(name, 1)
	p1 := mustAcquire(t, s, 1)
	second := goSemAcquire(t, srv, name, 1, 1, dlock.WithTTL(ttl))
	waitSemQueued(t, srv, name, 1)
	if err := p1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p2 := second.await(t, 20*time.Second, "the waiter granted from the queue")
	wantSemSolo(t, srv, name, p2, "after the hand-off")
	if p2.Token() <= p1.Token() {
		t.Errorf("the granted waiter's token %d not above the first holder's %d", p2.Token(), p1.Token())
	}

	granted := time.Now()
	waitFor(t, 20*time.Second, func() bool { return time.Since(granted) > 3*ttl }, "three TTLs of renewals")
	if err := p2.Err(); err != nil {
		t.Fatalf("the granted holder lost its permits while renewed: %v", err)
	}
	wantSemSolo(t, srv, name, p2, "after renewals")
	if d, err := p2.TTL(ctx); err != nil || d <= 0 || d > ttl {
		t.Errorf("the granted holder's TTL = %v, %v; want in (0, %v]", d, err, ttl)
	}
	if err := p2.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend of the granted holder: %v", err)
	}
	wantAvailable(t, s, 0, "the granted holder holding the permit")
	infos, err := newClient(t, srv).Inspect(ctx, name)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	info := infoOf(t, infos, dlock.KindSemaphore)
	if len(info.Holders) != 1 || info.Holders[0].Owner != p2.Owner() || info.Holders[0].Token != p2.Token() || info.Holders[0].Permits != 1 {
		t.Errorf("Inspect holders = %+v, want the granted holder with 1 permit and token %d", info.Holders, p2.Token())
	}

	third := goSemAcquire(t, srv, name, 1, 1)
	waitSemQueued(t, srv, name, 1)
	wantSemSolo(t, srv, name, p2, "a waiter queued behind it")
	if err := p2.Release(ctx); err != nil {
		t.Fatalf("Release of the granted holder: %v", err)
	}
	p3 := third.await(t, 20*time.Second, "the waiter granted after the solo grant")
	wantSemSolo(t, srv, name, p3, "after the second hand-off")
	if p3.Token() <= p2.Token() {
		t.Errorf("the third holder's token %d not above the second's %d", p3.Token(), p2.Token())
	}
	if err := p3.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := semKeysLeft(ctx, t, srv, name); n != 0 {
		t.Errorf("%d keys left after every permit was released", n)
	}
}

// Fencing tokens strictly increase along a chain of hand-offs through the
// queue, each holder holding in the solo form.
func TestSemaphoreQueueGrantsSoloTokensIncrease(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	name := t.Name()
	held := mustAcquire(t, newClient(t, srv).Semaphore(name, 2), 2)
	for i := 0; i < 4; i++ {
		next := goSemAcquire(t, srv, name, 2, 2)
		waitSemQueued(t, srv, name, 1)
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		p := next.await(t, 20*time.Second, "the next holder")
		wantSemSolo(t, srv, name, p, "a hand-off")
		if p.Token() <= held.Token() {
			t.Fatalf("hand-off %d: token %d not above the previous holder's %d", i, p.Token(), held.Token())
		}
		held = p
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A lone waiter granted fewer permits than the Semaphore has holds in the
// solo form too; a second holder beside it turns it into the zset form.
func TestSemaphoreQueueLoneGrantIsSolo(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	name := t.Name()
	s := newClient(t, srv).Semaphore(name, 3)
	p1 := mustAcquire(t, s, 3)
	waiter := goSemAcquire(t, srv, name, 3, 1)
	waitSemQueued(t, srv, name, 1)
	if err := p1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p2 := waiter.await(t, 20*time.Second, "the lone waiter")
	wantSemSolo(t, srv, name, p2, "after the lone grant")
	wantAvailable(t, s, 2, "the lone waiter holding 1 of 3")
	p3, err := newClient(t, srv).Semaphore(name, 3).TryAcquire(ctx, 2)
	if err != nil {
		t.Fatalf("TryAcquire(2) beside the lone holder: %v", err)
	}
	wantForm(t, srv, name, "zset", "two holders")
	wantAvailable(t, s, 0, "1 and 2 of 3 held")
	for _, p := range []*dlock.Permits{p2, p3} {
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := semKeysLeft(ctx, t, srv, name); n != 0 {
		t.Errorf("%d keys left after every permit was released", n)
	}
}

// Waiters granted together hold beside each other, in the zset form.
func TestSemaphoreQueueGrantsTogetherStayZset(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	name := t.Name()
	p := mustAcquire(t, newClient(t, srv).Semaphore(name, 2), 2)
	first := goSemAcquire(t, srv, name, 2, 1)
	waitSemQueued(t, srv, name, 1)
	second := goSemAcquire(t, srv, name, 2, 1)
	waitSemQueued(t, srv, name, 2)
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	q1 := first.await(t, 20*time.Second, "the first waiter")
	q2 := second.await(t, 20*time.Second, "the second waiter")
	wantForm(t, srv, name, "zset", "two waiters granted together")
	if q1.Token() <= p.Token() || q2.Token() <= q1.Token() {
		t.Errorf("tokens %d, %d after the holder's %d: want them increasing in grant order", q1.Token(), q2.Token(), p.Token())
	}
}

// With a limit stored, a grant from the queue never writes the solo form:
// the paths that read it in place take the caller's permits as the limit.
func TestSemaphoreQueueGrantWithStoredLimitIsZset(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	name := t.Name()
	s := newClient(t, srv).Semaphore(name, 3)
	if err := s.SetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p := mustAcquire(t, s, 1)
	wantForm(t, srv, name, "zset", "a holder under a stored limit")
	waiter := goSemAcquire(t, srv, name, 3, 1)
	waitSemQueued(t, srv, name, 1)
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	q := waiter.await(t, 20*time.Second, "the waiter under a stored limit")
	wantForm(t, srv, name, "zset", "a grant under a stored limit")
	if q.Token() <= p.Token() {
		t.Errorf("the waiter's token %d not above the holder's %d", q.Token(), p.Token())
	}
	wantAvailable(t, s, 0, "the waiter holding the one permit of the stored limit")
}
