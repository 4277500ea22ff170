package dlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// heldBy reports whether name has a holder, as Inspect sees it.
func heldBy(t *testing.T, c *dlock.Client, name string) bool {
	t.Helper()
	infos, err := c.Inspect(testCtx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		if len(info.Holders) > 0 {
			return true
		}
	}
	return false
}

// TestReleaseSentTwiceIsAReleaseNotALoss: when go-redis loses the reply to a
// release and sends it again, the second sending finds the lock gone,
// released by the first. Unlock must report the release, not ErrNotHeld
// ("it expired or was taken over"), which would tell the holder its
// critical section may have overlapped another's.
func TestReleaseSentTwiceIsAReleaseNotALoss(t *testing.T) {
	t.Parallel()
	c, srv, proxy := clientWithLostReplies(t)
	direct := newClient(t, srv)
	ctx := dlock.WithOwner(testCtx(t), "worker-1") // for the ReentrantMutex
	// Each takes its primitive and returns how to release it.
	lease := func(l *dlock.Lease, err error) (func(context.Context) error, error) {
		if err != nil {
			return nil, err
		}
		return l.Unlock, nil
	}
	for _, tc := range []struct {
		name string
		take func() (func(context.Context) error, error)
	}{
		{"mutex", func() (func(context.Context) error, error) { return lease(c.Mutex("mutex").TryLock(ctx)) }},
		{"fair", func() (func(context.Context) error, error) { return lease(c.FairMutex("fair").TryLock(ctx)) }},
		{"reentrant", func() (func(context.Context) error, error) { return lease(c.ReentrantMutex("reentrant").TryLock(ctx)) }},
		{"rw-write", func() (func(context.Context) error, error) { return lease(c.RWMutex("rw-write").TryLock(ctx)) }},
		{"rw-read", func() (func(context.Context) error, error) { return lease(c.RWMutex("rw-read").TryRLock(ctx)) }},
		{"sem", func() (func(context.Context) error, error) {
			p, err := c.Semaphore("sem", 2).TryAcquire(ctx, 1)
			if err != nil {
				return nil, err
			}
			return p.Release, nil
		}},
	} {
		for round := 0; round < 2; round++ { // the first loads the scripts
			release, err := tc.take()
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if round == 0 {
				if err := release(ctx); err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				continue
			}
			released := func() bool { return !heldBy(t, direct, tc.name) }
			if err := afterLostReply(t, []*redistest.Proxy{proxy}, released, func() error { return release(ctx) }); err != nil {
				t.Errorf("%s: a release sent twice: %v, want nil", tc.name, err)
			}
		}
	}
}

// TestLocalHandoffSentTwiceStillHandsOver: an Unlock that hands the lock
// to a goroutine of its own Client moves the key to a fresh owner value in
// one script. Sent twice, the second sending finds the key already moved:
// it must count as the hand-off, or the lock would sit with an owner
// nobody knows until its TTL ran out.
func TestLocalHandoffSentTwiceStillHandsOver(t *testing.T) {
	t.Parallel()
	c, srv, proxy := clientWithLostReplies(t)
	ctx := testCtx(t)
	name := t.Name()
	warm := mustLock(t, c, name+"-warm")
	var wg sync.WaitGroup
	lockThen(ctx, t, &wg, c, name+"-warm", func(*dlock.Lease) {})
	lockThen(ctx, t, &wg, c, name+"-warm", func(*dlock.Lease) {})
	waitFor(t, 10*time.Second, func() bool { return dlock.LocalWaiters(c, name+"-warm") == 2 }, "the warm-up goroutines to line up")
	if err := warm.Unlock(ctx); err != nil { // loads the transfer script
		t.Fatal(err)
	}
	wg.Wait()

	held := mustLock(t, c, name)
	got := make(chan time.Time, 2)
	for i := 0; i < 2; i++ {
		lockThen(ctx, t, &wg, c, name, func(*dlock.Lease) { got <- time.Now() })
		waitFor(t, 10*time.Second, func() bool { return dlock.LocalWaiters(c, name) == i+1 }, "the goroutines to line up")
	}
	holder, _ := srv.Do(t, "GET", lockKey(name)).(string)
	moved := func() bool { v, _ := srv.Do(t, "GET", lockKey(name)).(string); return v != holder }
	start := time.Now()
	if err := afterLostReply(t, []*redistest.Proxy{proxy}, moved, func() error { return held.Unlock(ctx) }); err != nil {
		t.Errorf("Unlock whose hand-off was sent twice: %v, want nil", err)
	}
	for i := 0; i < 2; i++ {
		select {
		case <-got:
		case <-time.After(10 * time.Second): // the lock's TTL is 30s
			t.Fatalf("waiter %d had no lock %v after the Unlock", i+1, time.Since(start))
		}
	}
	wg.Wait()
}

// TestRedlockReleaseAndHandoffSentTwice: on two of three nodes the reply to
// a Redlock's release, or to its local hand-off, is lost and the script
// sent again. The release must not read as "no longer held" (the second
// sendings find the keys the first ones deleted), and the hand-off must
// not fail on keys its own first sendings moved.
func TestRedlockReleaseAndHandoffSentTwice(t *testing.T) {
	t.Parallel()
	for _, handoff := range []bool{false, true} {
		t.Run(map[bool]string{false: "release", true: "hand-off"}[handoff], func(t *testing.T) { testRedlockSentTwice(t, handoff) })
	}
}

func testRedlockSentTwice(t *testing.T, handoff bool) {
	servers := redistest.StartNodes(t, 3)
	proxies, addrs := proxied(t, servers)
	// Long node timeouts: the second sendings must be waited for.
	r := newRedlock(t, addrs, slowRetry, dlock.WithNodeTimeout(5*time.Second))
	ctx := testCtx(t)
	name := t.Name()
	keyOn := func(i int) string { v, _ := servers[i].Do(t, "GET", lockKey(name)).(string); return v }

	// Load the scripts on every node (a NOSCRIPT reply would be held too):
	// a lock and a release, then a hand-off.
	held, err := r.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if held, err = r.Mutex(name).TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	next := lockWhenHeir(ctx, t, r, name)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-next
	if got.err != nil {
		t.Fatal(got.err)
	}
	from := dlock.LeaseOwner(got.l)
	// The hand-off returned once a quorum moved: let the last node catch
	// up, or its reply would be held below.
	waitFor(t, 10*time.Second, func() bool {
		return keyOn(0) == from && keyOn(1) == from && keyOn(2) == from
	}, "every node to hold the new owner")

	done := func() bool { return keyOn(0) == "" && keyOn(1) == "" }
	what := "release"
	if handoff {
		next = lockWhenHeir(ctx, t, r, name)
		done = func() bool { return keyOn(0) != from && keyOn(1) != from }
		what = "hand-off"
	}
	if err := afterLostReply(t, proxies[:2], done, func() error { return got.l.Unlock(ctx) }); err != nil {
		t.Errorf("Unlock whose %s was sent twice: %v, want nil", what, err)
	}
	if handoff {
		got = <-next
		if got.err != nil {
			t.Fatalf("Lock handed the lock by a hand-off sent twice: %v", got.err)
		}
		if err := got.l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wantNoKey(t, servers, lockKey(name))
}

// TestDowngradeSentTwiceStillDowngrades: Downgrade turns the writer into a
// reader under a fresh owner value. Sent twice, the second sending finds
// the writer gone: it must report the downgrade, or the read lock would sit
// with an owner nobody knows, keeping writers out until its TTL ran out.
func TestDowngradeSentTwiceStillDowngrades(t *testing.T) {
	t.Parallel()
	c, srv, proxy := clientWithLostReplies(t)
	ctx := testCtx(t)
	name := t.Name()
	for round := 0; round < 2; round++ { // the first loads the scripts
		rw := c.RWMutex(fmt.Sprint(name, round))
		w, err := rw.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var r *dlock.Lease
		downgrade := func() (err error) { r, err = rw.Downgrade(ctx, w); return err }
		if round == 0 {
			if err := downgrade(); err != nil {
				t.Fatal(err)
			}
		} else {
			// The writer holds in the solo form (a string: ZRANGE fails on
			// it) until the downgrade turns it into a sorted set.
			rdb := srv.Client(t)
			reading := func() bool {
				first, _ := rdb.ZRange(ctx, lockKey(rw.Name())+":rw", 0, 0).Result()
				return len(first) == 1 && strings.HasPrefix(first[0], "R")
			}
			if err := afterLostReply(t, []*redistest.Proxy{proxy}, reading, downgrade); err != nil {
				t.Fatalf("Downgrade sent twice: %v, want the read lease", err)
			}
		}
		if err := r.Unlock(ctx); err != nil {
			t.Fatalf("the read lease of a downgrade: %v", err)
		}
		if _, err := rw.TryLock(ctx); err != nil { // nobody holds it now
			t.Fatalf("TryLock after the downgraded lock was released: %v", err)
		}
	}
}
