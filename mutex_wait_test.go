package dlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestWaitersOfOneClientShareOneQueueEntry: however many goroutines of one
// Client wait, the lock's queue in Redis holds one entry for the Client,
// and every goroutine still gets the lock, one at a time.
func TestWaitersOfOneClientShareOneQueueEntry(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	holder := newClient(t, srv)
	held := mustLock(t, holder, name)
	a, b := newClient(t, srv), newClient(t, srv)

	const perClient = 25
	var holders occupancy
	var wg sync.WaitGroup
	for _, c := range []*dlock.Client{a, b} {
		for i := 0; i < perClient; i++ {
			lockThen(ctx, t, &wg, c, name, func(*dlock.Lease) {
				holders.enter(t)
				time.Sleep(time.Millisecond)
				holders.leave()
			})
		}
	}
	waitFor(t, 10*time.Second, func() bool {
		return dlock.LocalWaiters(a, name) == perClient && dlock.LocalWaiters(b, name) == perClient
	}, "every goroutine to line up")
	// Goroutines that queued in Redis before finding a local queue to join
	// give their entry up in the background.
	waitFor(t, 5*time.Second, func() bool {
		return srv.Client(t).ZCard(ctx, lockKey(name)+":q").Val() == 2
	}, "one queue entry per client")
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if n := lockKeysLeft(ctx, t, srv, name); n != 0 {
		t.Errorf("%d keys left after every waiter unlocked", n)
	}
}

// TestUnlockHandsOverLocally: a Client's goroutines that wait for a lock
// one of them took without queueing are served in arrival order: the
// first, which waits in Redis, through the queue (one grant published),
// and in its turn the others by local hand-offs, without a grant
// published, each with a fresh fencing token. A local hand-off past the
// first would serve it last.
func TestUnlockHandsOverLocally(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	c := newClient(t, srv)
	held := mustLock(t, c, name)

	sub := srv.Client(t).Subscribe(ctx, lockKey(name))
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}

	const waiters = 4
	type grant struct {
		waiter int
		token  int64
	}
	grants := make(chan grant, waiters)
	var wg sync.WaitGroup
	for i := 0; i < waiters; i++ {
		i := i
		lockThen(ctx, t, &wg, c, name, func(l *dlock.Lease) { grants <- grant{i, l.Token()} })
		waitFor(t, 10*time.Second, func() bool { return dlock.LocalWaiters(c, name) == i+1 }, "the goroutine to line up")
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(grants)
	last, next := held.Token(), 0
	for g := range grants {
		if g.token <= last {
			t.Errorf("token %d after %d", g.token, last)
		}
		if g.waiter != next {
			t.Errorf("grant %d went to waiter %d, want waiter %d (arrival order)", next+1, g.waiter, next)
		}
		last, next = g.token, next+1
	}
	// The first one's grant through the queue, then three local hand-offs
	// in its turn: one message on the channel.
	published := messagesLeft(ctx, sub)
	if published != 1 {
		t.Errorf("%d grants published for %d hand-offs, want 1 (the rest handed over locally)", published, waiters)
	}
	if n := lockKeysLeft(ctx, t, srv, name); n != 0 {
		t.Errorf("%d keys left after every waiter unlocked", n)
	}
}

// TestCloseEndsAWaitStandingBy: Close ends the wait of a goroutine that
// stands by for a local hand-off in its Client's turn (nobody of the Client
// waits in Redis then) at once, not when the standby grace runs out.
func TestCloseEndsAWaitStandingBy(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := redistest.UniqueName(t)
	ctx := testCtx(t)
	// The first holder's Client closes with the lock held: free its keys.
	rdb := srv.Client(t)
	t.Cleanup(func() { rdb.Del(context.Background(), lockKey(name), lockKey(name)+":q", lockKey(name)+":w") })
	x, c := newClient(t, srv), newClient(t, srv) // Close is idempotent: the test's own comes first
	dlock.SetStandbyGrace(c, time.Minute)
	held := mustLock(t, x, name)

	first, second := beginTurn(ctx, t, srv, c, held, name, false)
	if first == nil {
		return
	}
	// The turn has begun: the second goroutine stands by.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-second:
		if !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("Lock standing by when the Client closed: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close left a Lock standing by for a local hand-off")
	}
}

// TestWaiterFindingTheLockFreeLeavesTheQueue: a queued waiter whose poll
// finds the lock free (its holder's key vanished without a hand-off) takes
// it and leaves the queue, so its own release does not hand the lock back
// to its stale place (where nobody would claim it).
func TestWaiterFindingTheLockFreeLeavesTheQueue(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	holder, waiter := newClient(t, srv), newClient(t, srv)
	held := mustLock(t, holder, name)
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := waiter.Mutex(name).Lock(ctx)
		if err != nil {
			t.Errorf("Lock: %v", err)
		}
		got <- l
	}()
	waitQueued(t, srv, name, 1)
	rdb := srv.Client(t)
	rdb.Del(ctx, lockKey(name)) // the holder's key expires: nobody publishes
	l := <-got
	if l == nil {
		return
	}
	if n := rdb.ZCard(ctx, lockKey(name)+":q").Val(); n != 0 {
		t.Errorf("%d queue entries after the only waiter took the lock, want 0", n)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := rdb.Get(ctx, lockKey(name)).Result(); err == nil {
		t.Errorf("after the only holder's Unlock the lock is held by %q, want it free", v)
	}
	_ = held.Unlock(ctx) // lost already: ErrNotHeld
}

// TestCancelledWaitersLeaveNothingLocked: goroutines of one Client whose
// Lock calls end at random moments, some just as the lock is handed to
// them, never hold it together and leave nothing behind: a queued waiter
// whose poll finds the lock free leaves the queue as it takes the lock, so
// its release never hands the lock back to its own stale place.
func TestCancelledWaitersLeaveNothingLocked(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	c := newClient(t, srv)
	var (
		holders occupancy
		wg      sync.WaitGroup
	)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				// Goroutine 0 never gives up, so the lock keeps changing
				// hands however slow this machine is; the others give up
				// after 0 to 16 ms.
				wctx, cancel := context.WithCancel(ctx)
				if g > 0 {
					cancel()
					wctx, cancel = context.WithTimeout(ctx, time.Duration((g+i)%5)*4*time.Millisecond)
				}
				l, err := c.Mutex(name).Lock(wctx)
				cancel()
				if err != nil {
					if !errors.Is(err, dlock.ErrNotObtained) {
						t.Errorf("Lock: %v", err)
					}
					continue
				}
				holders.enter(t)
				holders.leave()
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("Unlock: %v", err)
				}
			}
		}(g)
	}
	wg.Wait()
	if holders.grants < 40 {
		t.Fatalf("%d Lock calls succeeded; goroutine 0 alone makes 40", holders.grants)
	}
	waitFor(t, 10*time.Second, func() bool { return lockKeysLeft(ctx, t, srv, name) == 0 }, "the lock and its queue to be gone")
	l, err := c.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after every waiter left: %v", err)
	}
	_ = l.Unlock(ctx)
}

func TestLocalWaitersLeaveOneByOne(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	holder, c := newClient(t, srv), newClient(t, srv)
	held := mustLock(t, holder, name)

	cancels := make([]context.CancelFunc, 3)
	errs := make(chan error, 3)
	for i := range cancels {
		wctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		go func() {
			_, err := c.Mutex(name).Lock(wctx)
			errs <- err
		}()
	}
	waitQueued(t, srv, name, 1)
	waitFor(t, 10*time.Second, func() bool { return dlock.LocalWaiters(c, name) == len(cancels) }, "every goroutine to line up")
	for i, cancel := range cancels {
		cancel()
		if err := <-errs; !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Fatalf("waiter %d: got %v, want ErrNotObtained and Canceled", i, err)
		}
		if i < len(cancels)-1 {
			if n := srv.Client(t).ZCard(ctx, lockKey(name)+":q").Val(); n != 1 {
				t.Fatalf("the client left the queue while %d of its waiters still wait", len(cancels)-1-i)
			}
		}
	}
	waitFor(t, 5*time.Second, func() bool {
		return srv.Client(t).ZCard(ctx, lockKey(name)+":q").Val() == 0
	}, "the client to leave the queue with its last waiter")
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := srv.Client(t).Exists(ctx, lockKey(name)).Val(); n != 0 {
		t.Error("the lock was handed to a client nobody waits in")
	}
}

// lockThen starts a goroutine, counted in wg, that takes name's Mutex with
// c, runs held while it holds the lock, and unlocks, reporting failures on t.
func lockThen(ctx context.Context, t testing.TB, wg *sync.WaitGroup, c *dlock.Client, name string, held func(*dlock.Lease)) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		l, err := c.Mutex(name).Lock(ctx)
		if err != nil {
			t.Errorf("Lock: %v", err)
			return
		}
		held(l)
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	}()
}

// messagesLeft counts the messages sub receives until none comes for 200 ms.
func messagesLeft(ctx context.Context, sub *redis.PubSub) int {
	n := 0
	for {
		msgCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := sub.ReceiveMessage(msgCtx)
		cancel()
		if err != nil {
			return n
		}
		n++
	}
}

// lockKeysLeft counts the Mutex name's lock key and queue still in Redis.
func lockKeysLeft(ctx context.Context, t testing.TB, srv *redistest.Server, name string) int64 {
	return srv.Client(t).Exists(ctx, lockKey(name), lockKey(name)+":q").Val()
}

// occupancy counts the holders of a lock as a test sees them, and reports
// more than one at a time.
type occupancy struct {
	mu      sync.Mutex
	holders int
	grants  int
}

func (o *occupancy) enter(t testing.TB) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.holders++
	o.grants++
	if o.holders != 1 {
		t.Errorf("%d holders at once", o.holders)
	}
}

func (o *occupancy) leave() {
	o.mu.Lock()
	o.holders--
	o.mu.Unlock()
}
