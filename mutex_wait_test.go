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

// TestProcessesTakeTurns: with many goroutines waiting in each of two
// clients, the lock alternates between the clients in turns: a grant
// through Redis, then at most MaxLocalHandoffs local hand-offs, and the
// fencing tokens increase in grant order. That holds for the first turn
// too, although the holder's client also has the first place in Redis: the
// holder took the lock without queueing, so its Unlock goes through the
// queue. A turn's last Unlock and its client's next queue entry reach Redis
// in either order (docs/waiting.md, "A process's turn"), so a client whose
// next entry arrives first, while the other's is delayed, may take two
// turns in a row: the bound is on local hand-offs, told apart by the
// acquire's attempts (a local hand-off asks Redis nothing).
func TestProcessesTakeTurns(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	rec := &recorder{}
	a, b := newClient(t, srv, dlock.WithObserver(rec)), newClient(t, srv, dlock.WithObserver(rec))
	held := mustLock(t, a, name)

	const perClient = 2*dlock.MaxLocalHandoffs + 4
	type grant struct {
		label string
		token int64
	}
	var mu sync.Mutex
	var order []grant
	var wg sync.WaitGroup
	start := func(c *dlock.Client, label string, n int) {
		for i := 0; i < n; i++ {
			lockThen(ctx, t, &wg, c, name, func(l *dlock.Lease) {
				mu.Lock()
				order = append(order, grant{label, l.Token()})
				mu.Unlock()
			})
		}
	}
	start(a, "a", perClient)
	waitQueued(t, srv, name, 1)
	start(b, "b", perClient)
	waitQueued(t, srv, name, 2)
	waitFor(t, 10*time.Second, func() bool {
		return dlock.LocalWaiters(a, name) == perClient && dlock.LocalWaiters(b, name) == perClient
	}, "every goroutine to line up")
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	attempts := map[int64]int{}
	for _, o := range rec.snapshot().outcomes {
		if o.Err == nil {
			attempts[o.Token] = o.Attempts
		}
	}
	labels := make([]string, len(order))
	local, turns := 0, 0
	for i, g := range order {
		labels[i] = g.label
		if i > 0 && g.token <= order[i-1].token {
			t.Errorf("grant %d got token %d after %d", i, g.token, order[i-1].token)
		}
		if i == 0 || g.label != order[i-1].label {
			turns++
		}
		if i > 0 && g.label == order[i-1].label && attempts[g.token] == 0 {
			local++
		} else {
			local = 0 // a grant through Redis begins a turn
		}
		if local > dlock.MaxLocalHandoffs {
			t.Fatalf("grant order %v: %d local hand-offs in a row, want at most %d", labels[:i+1], local, dlock.MaxLocalHandoffs)
		}
	}
	if turns < 3 {
		t.Errorf("grant order %v: the clients took %d turns, want them to alternate", labels, turns)
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

// TestTurnServesItsFirstWaiterLocally: once a Client's head is granted
// the lock through Redis, the Client's turn serves its other waiters, the
// first included, by local hand-offs in arrival order, with nobody of it
// queued in Redis meanwhile. A first waiter queued in Redis as the turn
// began would sit the turn out and come last (A, C, B), through a second
// published grant.
func TestTurnServesItsFirstWaiterLocally(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	x, c := newClient(t, srv), newClient(t, srv)
	// A machine stall in the turn must not make B queue in Redis by itself.
	dlock.SetStandbyGrace(c, time.Minute)
	held := mustLock(t, x, name)

	sub := srv.Client(t).Subscribe(ctx, lockKey(name))
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var order []string
	queuedInTurn := int64(-1)
	var wg sync.WaitGroup
	for i, label := range []string{"A", "B", "C"} {
		label := label
		lockThen(ctx, t, &wg, c, name, func(*dlock.Lease) {
			mu.Lock()
			order = append(order, label)
			mu.Unlock()
			if label == "A" {
				// B and C stand by, in this Client's queue only.
				queuedInTurn = srv.Client(t).ZCard(ctx, lockKey(name)+":q").Val()
			}
		})
		if i == 0 {
			waitQueued(t, srv, name, 1)
		}
		waitFor(t, 10*time.Second, func() bool { return dlock.LocalWaiters(c, name) == i+1 }, "the goroutine to line up")
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got := strings.Join(order, " "); got != "A B C" {
		t.Errorf("grant order %s, want A B C", got)
	}
	if queuedInTurn != 0 {
		t.Errorf("%d owners queued in Redis while the Client's turn served its waiters, want 0", queuedInTurn)
	}
	published := messagesLeft(ctx, sub)
	if published != 1 {
		t.Errorf("%d grants published, want 1 (to A; B and C served locally)", published)
	}
	if n := lockKeysLeft(ctx, t, srv, name); n != 0 {
		t.Errorf("%d keys left after every waiter unlocked", n)
	}
}

// TestTurnWithoutUnlockPassesTheLockOn: a Client's turn whose holder never
// unlocks (its lease expires) still ends: the waiter standing by for a
// local hand-off queues in Redis after the standby grace, and takes the
// lock once the holder's key expires.
func TestTurnWithoutUnlockPassesTheLockOn(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	x, c := newClient(t, srv), newClient(t, srv)
	held := mustLock(t, x, name)
	opts := []dlock.Option{dlock.WithTTL(500 * time.Millisecond), dlock.WithAutoRenew(false)}

	first, second := beginTurn(ctx, t, srv, c, held, name, true, opts...)
	if first == nil {
		return
	}
	// first never unlocks: its lease expires.
	select {
	case err := <-second:
		if err != nil {
			t.Fatalf("second Lock and Unlock: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the second waiter never got the lock that the first holder let expire")
	}
}

// TestFailedHandOffEndsTheTurn: a local hand-off that fails in the middle
// of a Client's turn (the holder's key is gone) ends the turn at once: a
// waiter that stood by queues in Redis, and every waiter gets the lock,
// although a turn nobody ends would keep them standing by for a minute here.
func TestFailedHandOffEndsTheTurn(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	x, c := newClient(t, srv), newClient(t, srv)
	dlock.SetStandbyGrace(c, time.Minute)
	held := mustLock(t, x, name)

	unlocked := make(chan error, 1)
	go func() {
		l, err := c.Mutex(name).Lock(ctx)
		if err != nil {
			t.Errorf("first Lock: %v", err)
			unlocked <- nil
			return
		}
		srv.Client(t).Del(ctx, lockKey(name)) // the holder's key is gone
		unlocked <- l.Unlock(ctx)
	}()
	waitQueued(t, srv, name, 1)
	var wg sync.WaitGroup
	for i := 2; i <= 3; i++ {
		lockThen(ctx, t, &wg, c, name, func(*dlock.Lease) {})
		waitFor(t, 10*time.Second, func() bool { return dlock.LocalWaiters(c, name) == i }, "the goroutine to line up")
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-unlocked; !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock of a lock whose key is gone: %v, want ErrNotHeld", err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the waiters behind a failed hand-off still wait")
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
// them, never hold it together and leave nothing behind.
//
// It found a stall: a queued waiter whose poll found the lock free took it
// without leaving the queue, so its release handed the lock back to its
// own stale place, and the lock sat unclaimed for a claim window.
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

// beginTurn lines up two goroutines of c on name, which held (a lease of
// another Client) holds, releases held, and returns once the first of them
// holds the lock through Redis, which begins c's turn: the second then
// stands by for a local hand-off. The first's lease is returned (nil when
// its Lock failed, reported on t); second receives the second's Lock error,
// after it unlocked when unlock is set.
func beginTurn(ctx context.Context, t *testing.T, srv *redistest.Server, c *dlock.Client, held *dlock.Lease, name string, unlock bool, opts ...dlock.Option) (first *dlock.Lease, second <-chan error) {
	t.Helper()
	firstc, secondc := make(chan *dlock.Lease, 1), make(chan error, 1)
	go func() {
		l, err := c.Mutex(name, opts...).Lock(ctx)
		if err != nil {
			t.Errorf("first Lock: %v", err)
		}
		firstc <- l
	}()
	waitQueued(t, srv, name, 1)
	go func() {
		l, err := c.Mutex(name, opts...).Lock(ctx)
		if err == nil && unlock {
			err = l.Unlock(ctx)
		}
		secondc <- err
	}()
	waitFor(t, 10*time.Second, func() bool { return dlock.LocalWaiters(c, name) == 2 }, "the second goroutine to line up")
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	return <-firstc, secondc
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
