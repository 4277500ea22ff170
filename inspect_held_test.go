package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// heldTTL is short, so that the holds' first renewals (a third of it after
// their grants) record their starts soon, and long enough for renewals on
// a loaded machine under -race.
const heldTTL = 2 * time.Second

// heldCase is a name held by n holders of one kind since a moment no later
// than the acquires began.
type heldCase struct {
	name  string
	kind  dlock.Kind
	n     int
	since time.Time
}

// holdEveryKind holds a name of every kind that has holders, on c, until
// the test ends; the RWMutex and the Semaphore by two holders each.
func holdEveryKind(t *testing.T, c *dlock.Client, base string) []heldCase {
	ctx := testCtx(t)
	var cases []heldCase
	add := func(name string, kind dlock.Kind, n int, take func() (release func(context.Context) error, err error)) {
		t.Helper()
		cases = append(cases, heldCase{name, kind, n, time.Now()})
		for i := 0; i < n; i++ {
			release, err := take()
			if err != nil {
				t.Fatalf("%s %q: %v", kind, name, err)
			}
			t.Cleanup(func() { _ = release(context.Background()) })
		}
	}
	lease := func(l *dlock.Lease, err error) (func(context.Context) error, error) {
		if err != nil {
			return nil, err
		}
		return l.Unlock, nil
	}
	add(base+"-mutex", dlock.KindMutex, 1, func() (func(context.Context) error, error) {
		return lease(c.Mutex(base + "-mutex").Lock(ctx))
	})
	add(base+"-multi", dlock.KindMutex, 1, func() (func(context.Context) error, error) {
		return lease(c.MultiLock(base+"-multi", base+"-multi2").Lock(ctx))
	})
	add(base+"-re", dlock.KindReentrant, 1, func() (func(context.Context) error, error) {
		return lease(c.ReentrantMutex(base + "-re").Lock(dlock.WithOwner(ctx, "job-1")))
	})
	add(base+"-rw", dlock.KindRWMutex, 2, func() (func(context.Context) error, error) {
		return lease(c.RWMutex(base + "-rw").RLock(ctx))
	})
	add(base+"-sem", dlock.KindSemaphore, 2, func() (func(context.Context) error, error) {
		p, err := c.Semaphore(base+"-sem", 3).Acquire(ctx, 1)
		if err != nil {
			return nil, err
		}
		return p.Release, nil
	})
	add(base+"-elect", dlock.KindElection, 1, func() (func(context.Context) error, error) {
		l, err := c.Election(base+"-elect").Campaign(ctx, "me")
		if err != nil {
			return nil, err
		}
		return l.Resign, nil
	})
	return cases
}

// heldHolders inspects h's holders, failing unless there are h.n of them,
// each held for no longer than the time since the acquires began.
func heldHolders(t *testing.T, c *dlock.Client, h heldCase) []dlock.Holder {
	t.Helper()
	infos, err := c.Inspect(testCtx(t), h.name)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", h.name, err)
	}
	hs := infoOf(t, infos, h.kind).Holders
	if len(hs) != h.n {
		t.Fatalf("%s %q: holders %+v, want %d", h.kind, h.name, hs, h.n)
	}
	limit := time.Since(h.since) + 10*time.Millisecond // read after the reply; ms rounding
	for _, x := range hs {
		if x.HeldFor > limit {
			t.Fatalf("%s %q: held for %v, more than the %v since the acquire began", h.kind, h.name, x.HeldFor, limit)
		}
	}
	return hs
}

// Holders' HeldFor, for every kind: recorded along a renewal once the hold
// is a quarter of its TTL old (0 before), from the server's clock, never
// more than the time since the acquire began, and growing while held.
func TestInspectHeldForEveryKind(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Shared(t), dlock.WithTTL(heldTTL))
	for _, h := range holdEveryKind(t, c, uniqueName(t)) {
		var first []dlock.Holder
		waitFor(t, 10*time.Second, func() bool {
			first = heldHolders(t, c, h)
			for _, x := range first {
				if x.HeldFor == 0 {
					return false
				}
			}
			return true
		}, string(h.kind)+" holders whose start was recorded")
		for _, x := range first {
			if x.HeldFor < heldTTL/4-2*time.Millisecond {
				t.Fatalf("%s %q: held for %v, recorded before a quarter of the TTL", h.kind, h.name, x.HeldFor)
			}
		}
		waitFor(t, 10*time.Second, func() bool {
			now := heldHolders(t, c, h)
			for i := range now {
				if now[i].HeldFor <= first[i].HeldFor {
					return false
				}
			}
			return true
		}, string(h.kind)+" hold times that grow")
	}
}

// A hold younger than a quarter of its TTL has no recorded start yet, and
// the next holder never shows the previous one's time.
func TestInspectHeldForIsTheCurrentHolders(t *testing.T) {
	t.Parallel()
	name := uniqueName(t)
	ctx := testCtx(t)
	c := newClient(t, redistest.Shared(t), dlock.WithTTL(heldTTL))
	h := heldCase{name: name, kind: dlock.KindMutex, n: 1, since: time.Now()}
	first := mustLock(t, c, name)
	waitFor(t, 10*time.Second, func() bool { return heldHolders(t, c, h)[0].HeldFor >= time.Second }, "the first hold to reach a second")
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	h.since = time.Now()
	next := mustLock(t, c, name, dlock.WithTTL(time.Minute)) // first renewed after 20 s
	defer next.Unlock(ctx)
	if d := heldHolders(t, c, h)[0].HeldFor; d != 0 {
		t.Fatalf("a hold of %v with a TTL of a minute: held for %v, want 0 (not recorded yet)", time.Since(h.since), d)
	}
}
