package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// A release that fails may have reached Redis, or may still, and freed the
// lock, so the lease must stop saying that the lock is its own. On one node:
// the server runs the release, but its reply is held until Unlock's release
// timeout has passed.
func TestFailedUnlockEndsTheLease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, _, proxy := clientBehindProxy(t, srv.Addr(), &redis.Options{}, dlock.WithReleaseTimeout(300*time.Millisecond))
	ctx := testCtx(t)
	name := t.Name()
	l, err := c.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}

	proxy.HoldReplies(true)
	err = l.Unlock(ctx)
	proxy.HoldReplies(false)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Unlock whose reply is held: got %v, want DeadlineExceeded", err)
	}
	wantLostAfterFailedUnlock(t, l)
	if n := srv.Client(t).Exists(ctx, lockKey(name)).Val(); n != 0 {
		t.Errorf("the release did not run (the test's premise)")
	}
	// Unlock may be called again, and fail again (its reply held too).
	proxy.HoldReplies(true)
	err = l.Unlock(ctx)
	proxy.HoldReplies(false)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Unlock whose reply is held: got %v, want DeadlineExceeded", err)
	}
	// Called once more, it finds the lock gone, and says why that is
	// likeliest: the failed releases before it.
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) || !strings.Contains(err.Error(), "its release landed after all") {
		t.Errorf("third Unlock: got %v, want ErrNotHeld saying the failed release may have landed", err)
	}
}

// Client.Do whose release fails reports that failure, not a loss: the lock
// was held while fn ran, although the failed release ends the lease.
func TestDoWithAFailedReleaseIsNotALoss(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, _, proxy := clientBehindProxy(t, srv.Addr(), &redis.Options{}, dlock.WithReleaseTimeout(300*time.Millisecond))
	ctx := testCtx(t)
	name := t.Name()
	err := c.Do(ctx, name, func(ctx context.Context) error {
		proxy.HoldReplies(true) // the release's reply will be late
		return nil
	})
	proxy.HoldReplies(false)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Do whose release timed out: got %v, want DeadlineExceeded and not ErrLockLost", err)
	}
}

// The same over Redlock: Unlock returns ErrQuorum when two of three nodes
// answer later than the node timeout, and their releases land after it.
// The lease must not go back to being held: another Redlock may take the
// lock once the late releases land.
func TestRedlockFailedUnlockEndsTheLease(t *testing.T) {
	t.Parallel()
	servers := redistest.StartNodes(t, 3)
	proxies, addrs := proxied(t, servers)
	ctx := testCtx(t)
	name := t.Name()
	r := newRedlock(t, addrs, dlock.WithTTL(10*time.Second), dlock.WithNodeTimeout(100*time.Millisecond))
	loadScripts(t, ctx, r.Mutex(name+"-warm"))
	l := tryLockOnEveryNode(ctx, t, r, servers, name)

	proxies[1].SetLatency(500 * time.Millisecond)
	proxies[2].SetLatency(500 * time.Millisecond)
	err := l.Unlock(ctx)
	if !errors.Is(err, dlock.ErrQuorum) {
		t.Fatalf("Unlock over two slow nodes: got %v, want ErrQuorum", err)
	}
	wantLostAfterFailedUnlock(t, l)

	// The slow nodes' releases land, and another Redlock can take the lock.
	waitNoKey(t, servers, lockKey(name))
	other := newRedlock(t, addrsOf(servers))
	l2, err := other.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("another Redlock after the late releases: %v", err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

// wantLostAfterFailedUnlock fails unless l ended as lost when its Unlock
// failed.
func wantLostAfterFailedUnlock(t *testing.T, l *dlock.Lease) {
	t.Helper()
	select {
	case <-l.Done():
	default:
		t.Errorf("after a failed Unlock, Done is still open (Err %v): the lease says it holds a lock its release may free", l.Err())
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("after a failed Unlock, Err = %v, want ErrLockLost", err)
	}
}

// loadScripts takes and releases lk, so that the servers have the scripts:
// a request that meets NOSCRIPT runs nothing, and the client sends the
// script itself only once it hears that reply, so a request whose reply a
// test holds back must find its script loaded to run at all.
func loadScripts(t *testing.T, ctx context.Context, lk dlock.Locker) {
	t.Helper()
	l, err := lk.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A local hand-off whose reply comes too late: the transfer ran, so the
// key belongs to the fresh owner the Unlock made for its waiter, which was
// told to start its Lock over. That owner is given back once the call is
// done with, so the waiter gets the lock rather than waiting out a TTL for
// an owner nobody knows.
func TestFailedLocalHandoffIsGivenBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// The release timeout ends the Unlock whose reply is held, and leaves
	// the warm-up's Unlock time on a loaded machine. The waiter lease sets
	// the claim window of a grant through Redis, and so when its lease is
	// first renewed (a third of it): a renewal in flight when the replies
	// are held would keep the Unlock from sending its hand-off at all.
	c, _, proxy := clientBehindProxy(t, srv.Addr(), &redis.Options{},
		dlock.WithReleaseTimeout(time.Second), dlock.WithTTL(30*time.Second), dlock.WithWaiterLease(30*time.Second))
	// An Unlock hands over locally only in c's turn, to a goroutine that
	// stands by for it; one that stood by longer than wait.StandbyGrace (10ms,
	// soon over on a loaded machine) would queue in Redis instead, and the
	// Unlock release through there.
	dlock.SetStandbyGrace(c, time.Minute)
	other := newClient(t, srv)
	ctx := testCtx(t)
	name := t.Name()
	// turn begins c's turn on lock n: the first of two goroutines of c
	// holds it (granted through Redis), and the second stands by for the
	// local hand-off, then unlocks.
	turn := func(n string) (*dlock.Lease, <-chan error) {
		first, second := beginTurn(ctx, t, srv, c, mustLock(t, other, n), n, true)
		if first == nil {
			t.FailNow()
		}
		return first, second
	}
	first, second := turn(name + "-warm") // a local hand-off first, to load its script
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatalf("the warm-up's second goroutine: %v", err)
	}

	first, second = turn(name)
	proxy.HoldOpenReplies(true)
	err := first.Unlock(ctx)
	moved := srv.Client(t).Get(ctx, lockKey(name)).Val()
	proxy.HoldOpenReplies(false)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Unlock whose hand-off reply is held: got %v, want DeadlineExceeded", err)
	}
	if moved == "" || moved == first.Owner() {
		t.Fatalf("the transfer did not run (the test's premise): the key holds %q", moved)
	}
	select {
	case err := <-second: // it got the lock and released it
		if err != nil {
			t.Errorf("the waiter of the failed hand-off: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the waiter did not get the lock within 10s of a failed local hand-off; the key holds %q for %v more",
			srv.Client(t).Get(ctx, lockKey(name)).Val(), srv.Client(t).PTTL(ctx, lockKey(name)).Val())
		srv.Client(t).Del(ctx, lockKey(name))
		<-second
	}
}

// failFirst is a go-redis hook that fails, without sending it, the first
// command match accepts, alone or in a pipeline.
type failFirst struct {
	match func(cmd redis.Cmder) bool
	once  sync.Once
}

var errInjected = errors.New("injected: not sent")

func (h *failFirst) hit(cmd redis.Cmder) (hit bool) {
	if h.match(cmd) {
		h.once.Do(func() { hit = true })
	}
	return hit
}

func (h *failFirst) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.hit(cmd) {
			cmd.SetErr(errInjected)
			return errInjected
		}
		return next(ctx, cmd)
	}
}

func (h *failFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		sent := cmds[:0:0]
		for _, cmd := range cmds {
			if h.hit(cmd) {
				cmd.SetErr(errInjected)
				continue
			}
			sent = append(sent, cmd)
		}
		if len(sent) == 0 {
			return errInjected
		}
		return next(ctx, sent)
	}
}

// A MultiLock whose Unlock released one lock and failed on the other is
// lost, and a retried Unlock releases the other and reports success: the
// lock already released is done with, not ErrNotHeld. The second lock's
// queue holds a waiter whose lease is over, so that its release goes
// through mutex_release.lua (where the failure is injected), not with the
// first's in one multi_release.lua call.
func TestMultiLockUnlockRetriedAfterAPartialRelease(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := redis.NewClient(srv.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	name := t.Name()
	second := name + ":b"
	rdb.AddHook(&failFirst{match: func(cmd redis.Cmder) bool {
		return isScriptCall(cmd, scripts.MutexRelease) && scriptKey(cmd) == lockKey(second)
	}})
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := testCtx(t)
	l, err := c.MultiLock(name+":a", second).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rdb.ZAdd(ctx, lockKey(second)+":q", redis.Z{Score: 1, Member: "gone"})
	if err := l.Unlock(ctx); !errors.Is(err, errInjected) {
		t.Fatalf("Unlock with one release failing: got %v, want the injected failure", err)
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("after the partial release, Err = %v, want ErrLockLost", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("retried Unlock: got %v, want nil", err)
	}
	if n := srv.Client(t).Exists(ctx, lockKey(name+":a"), lockKey(second)).Val(); n != 0 {
		t.Errorf("%d of the two locks still held after the retried Unlock", n)
	}
}
