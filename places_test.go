package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/internal/wait"
)

// scriptCounter counts the script calls (EVALSHA, EVAL) a client sends,
// and among them queue_keep's; while refuseKeep is set, it fails
// queue_keep's calls without sending them.
type scriptCounter struct {
	n, keeps   atomic.Int64
	refuseKeep atomic.Bool
}

var errKeepRefused = errors.New("injected: queue_keep not sent")

func (h *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.refused(cmd) {
			return errKeepRefused
		}
		return next(ctx, cmd)
	}
}

func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		sent := cmds[:0:0]
		for _, cmd := range cmds {
			if !h.refused(cmd) {
				sent = append(sent, cmd)
			}
		}
		if len(sent) == 0 {
			return errKeepRefused
		}
		return next(ctx, sent)
	}
}

// refused counts cmd, and fails it when it is a keep to refuse.
func (h *scriptCounter) refused(cmd redis.Cmder) bool {
	name := strings.ToLower(cmd.Name())
	if name != "evalsha" && name != "eval" {
		return false
	}
	h.n.Add(1)
	if args := cmd.Args(); len(args) > 1 {
		if a := fmt.Sprint(args[1]); a == scripts.QueueKeep.Hash() || a == scripts.QueueKeep.Source() {
			h.keeps.Add(1)
			if h.refuseKeep.Load() {
				cmd.SetErr(errKeepRefused)
				return true
			}
		}
	}
	return false
}

// placeTestCtx returns a context that ends well after the test should.
func placeTestCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// placeKind is one primitive whose waiters each keep a place in its queue.
// A ReentrantMutex's holds, an RWMutex's writers and a Semaphore's
// acquisitions of every permit wait in their Client's local line instead,
// one place for them all (mutex_wait.go).
type placeKind struct {
	name  string
	queue func(c *Client, name string) string // the lock's queue key
	// together: a release grants several waiters at once (readers,
	// permits), in no order the test can see.
	together bool
	// hold takes the lock so that nobody else can; wait waits for it as
	// the waiter i; both return the release.
	hold func(ctx context.Context, c *Client, name string, opts ...Option) (func() error, error)
	wait func(ctx context.Context, c *Client, name string, i int, opts ...Option) (func() error, error)
}

// leaseRelease returns l's Unlock; the lease must not be lost by then.
func leaseRelease(l *Lease, err error) (func() error, error) {
	if err != nil {
		return nil, err
	}
	return func() error { return l.Unlock(context.Background()) }, nil
}

func permitsRelease(p *Permits, err error) (func() error, error) {
	if err != nil {
		return nil, err
	}
	return func() error { return p.Release(context.Background()) }, nil
}

var placeKinds = []placeKind{
	{
		name:  "FairMutex",
		queue: func(c *Client, name string) string { return c.FairMutex(name).m.keys.queue },
		hold: func(ctx context.Context, c *Client, name string, opts ...Option) (func() error, error) {
			return leaseRelease(c.FairMutex(name, opts...).Lock(ctx))
		},
		wait: func(ctx context.Context, c *Client, name string, _ int, opts ...Option) (func() error, error) {
			return leaseRelease(c.FairMutex(name, opts...).Lock(ctx))
		},
	},
	{
		name:     "RWMutex",
		queue:    func(c *Client, name string) string { return c.RWMutex(name).keys.queue },
		together: true,
		hold: func(ctx context.Context, c *Client, name string, opts ...Option) (func() error, error) {
			return leaseRelease(c.RWMutex(name, opts...).Lock(ctx))
		},
		wait: func(ctx context.Context, c *Client, name string, _ int, opts ...Option) (func() error, error) {
			return leaseRelease(c.RWMutex(name, opts...).RLock(ctx))
		},
	},
	{
		// One permit of two: acquisitions of every permit wait in the
		// local line.
		name:     "Semaphore",
		queue:    func(c *Client, name string) string { return c.Semaphore(name, 2).keys.queue },
		together: true,
		hold: func(ctx context.Context, c *Client, name string, opts ...Option) (func() error, error) {
			return permitsRelease(c.Semaphore(name, 2, opts...).Acquire(ctx, 2))
		},
		wait: func(ctx context.Context, c *Client, name string, _ int, opts ...Option) (func() error, error) {
			return permitsRelease(c.Semaphore(name, 2, opts...).Acquire(ctx, 1))
		},
	},
}

// placeWaiters is n goroutines of one Client waiting, in turn, for a lock
// another Client holds.
type placeWaiters struct {
	c       *Client
	counter *scriptCounter
	order   chan int // each waiter's index as it is granted the lock
	cancel  []context.CancelFunc
	wg      sync.WaitGroup
}

// The waiters' lease: they renew it every 200ms (a third of it), and a
// follower whose place the leader has not renewed for 300ms asks itself.
const placeTestLease = 600 * time.Millisecond

// startPlaceWaiters starts n waiters on k's lock name, one after the
// other, each once the one before is queued.
func startPlaceWaiters(t *testing.T, srv *redistest.Server, k placeKind, name string, n int) *placeWaiters {
	t.Helper()
	return startPlaceWaitersLeased(t, srv, k, name, n, placeTestLease)
}

// startPlaceWaitersLeased is startPlaceWaiters with a waiter lease of lease.
func startPlaceWaitersLeased(t *testing.T, srv *redistest.Server, k placeKind, name string, n int, lease time.Duration) *placeWaiters {
	t.Helper()
	rdb := srv.Client(t)
	w := &placeWaiters{counter: &scriptCounter{}, order: make(chan int, n)}
	rdb.AddHook(w.counter)
	c, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	w.c = c
	queue := k.queue(c, name)
	t.Cleanup(w.wg.Wait)
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		w.cancel = append(w.cancel, cancel)
		w.wg.Add(1)
		go func(i int) {
			defer w.wg.Done()
			release, err := k.wait(ctx, c, name, i, WithWaiterLease(lease))
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("waiter %d: %v", i, err)
				}
				return
			}
			w.order <- i
			// Granted after waiting many waiter leases, and so many
			// claim windows: the lease must still hold (a grant heard
			// by a kept waiter must leave time to claim it).
			if err := release(); err != nil {
				t.Errorf("waiter %d: releasing: %v", i, err)
			}
		}(i)
		w.waitPlaces(t, srv, queue, i+1)
	}
	return w
}

// holdFromAnotherClient takes k's lock name on a Client of its own and
// returns its release.
func holdFromAnotherClient(t *testing.T, srv *redistest.Server, k placeKind, name string) func() {
	t.Helper()
	holder, err := New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close() })
	release, err := k.hold(placeTestCtx(t), holder, name)
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := release(); err != nil {
			t.Errorf("releasing the holder: %v", err)
		}
	}
}

// waitForQueue waits until the queue key holds n entries.
func waitForQueue(t *testing.T, srv *redistest.Server, queue string, n int) {
	t.Helper()
	waitFor(t, 20*time.Second, func() bool {
		got, _ := srv.Do(t, "ZCARD", queue).(int64)
		return got == int64(n)
	}, fmt.Sprintf("%d entries in queue %s", n, queue))
}

// waitPlaces waits until the queue key holds n entries and the group of
// w's Client on it has n members. A waiter joins its group when its first
// attempt's reply is back, a little after Redis queued it, and leaves it
// a little after its place left the queue.
func (w *placeWaiters) waitPlaces(t *testing.T, srv *redistest.Server, queue string, n int) {
	t.Helper()
	waitForQueue(t, srv, queue, n)
	waitFor(t, 20*time.Second, func() bool { return len(w.members(queue)) == n },
		fmt.Sprintf("%d members in the group of %s", n, queue))
}

// keptRounds waits until the leader has renewed every waiter of the group
// on queue but the first skip ones at least rounds times more than now.
func (w *placeWaiters) waitKept(t *testing.T, queue string, skip, rounds int) {
	t.Helper()
	members := w.members(queue)
	if len(members) <= skip {
		t.Fatalf("%d members in the group of %s; want more than %d", len(members), queue, skip)
	}
	followers := members[skip:]
	start := make([]int64, len(followers))
	for i, m := range followers {
		start[i] = m.KeptByLeader()
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < len(followers); {
		if followers[i].KeptByLeader() >= start[i]+int64(rounds) {
			i++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiter %d of %s renewed %d times by its leader in 30s; want %d", skip+i, queue,
				followers[i].KeptByLeader()-start[i], rounds)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantGranted waits for the next n grants, in any order.
func (w *placeWaiters) wantGranted(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-w.order:
		case <-time.After(30 * time.Second):
			t.Fatalf("granted %d, then nothing for 30s; want %d grants", i, n)
		}
	}
}

// members returns the group's members, the leader first.
func (w *placeWaiters) members(queue string) []*wait.Member { return w.c.places.Members(queue) }

// wantArrivalOrder checks that the next n grants go to the waiters from
// first on, in the order they queued: a waiter that lost its place would
// have queued again at the back.
func (w *placeWaiters) wantArrivalOrder(t *testing.T, first, n int) {
	t.Helper()
	var got []int
	for len(got) < n {
		select {
		case i := <-w.order:
			got = append(got, i)
		case <-time.After(30 * time.Second):
			t.Fatalf("granted %v, then nothing for 30s; want %d grants", got, n)
		}
	}
	for i, g := range got {
		if g != first+i {
			t.Fatalf("granted in the order %v; want %d to %d, the arrival order (a waiter lost its place)", got, first, first+n-1)
		}
	}
}

// TestWaitersKeepTheirPlacesTogether: the goroutines of one Client waiting
// on a FairMutex, ReentrantMutex, RWMutex or Semaphore each keep their
// place in its queue, but only the first of them asks Redis: it renews the
// others' places in one call per refresh. Their places survive many
// waiter leases (the lock is granted in arrival order), and the Client
// sends a fraction of the script calls one poll per waiter and refresh
// would (16 waiters polling for themselves send at least 16 calls in
// each refresh).
func TestWaitersKeepTheirPlacesTogether(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	for _, k := range placeKinds {
		t.Run(k.name, func(t *testing.T) {
			name := "places-" + k.name
			release := holdFromAnotherClient(t, srv, k, name)
			const n = 16
			w := startPlaceWaiters(t, srv, k, name, n)
			queue := k.queue(w.c, name)
			w.waitKept(t, queue, 1, 1) // every follower known to the leader
			before := w.counter.n.Load()
			const rounds = 5 // about a second, each a third of a waiter lease
			w.waitKept(t, queue, 1, rounds)
			sent := w.counter.n.Load() - before
			t.Logf("%d waiters sent %d script calls while the leader renewed their places %d times", n, sent, rounds)
			// The leader's attempt and keep in each round, and a few
			// followers asking for themselves when the leader is late on a
			// loaded machine; one poll per waiter would be n*rounds = 80.
			if sent > n*rounds/2 {
				t.Errorf("%d waiters sent %d script calls while the leader renewed their places %d times; want at most %d",
					n, sent, rounds, n*rounds/2)
			}
			release()
			if k.together {
				w.wantGranted(t, n)
				return
			}
			w.wantArrivalOrder(t, 0, n)
		})
	}
}

// TestPlacesKeptAfterTheLeaderLeaves: when the waiter that keeps the
// others' places gives up, the next one keeps them from its next refresh
// on, and nobody loses a place.
func TestPlacesKeptAfterTheLeaderLeaves(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	k := placeKinds[0] // FairMutex: strict arrival order shows a lost place
	name := "places-leader-leaves"
	release := holdFromAnotherClient(t, srv, k, name)
	const n = 6
	w := startPlaceWaiters(t, srv, k, name, n)
	queue := k.queue(w.c, name)
	w.waitKept(t, queue, 1, 1)
	w.cancel[0]()
	w.waitPlaces(t, srv, queue, n-1) // the leader left the queue and the group
	// The new leader (waiter 1) renews the others, several waiter leases.
	w.waitKept(t, queue, 1, 5)
	if got := w.members(queue); len(got) != n-1 {
		t.Fatalf("%d members in the group; want %d", len(got), n-1)
	}
	release()
	w.wantArrivalOrder(t, 1, n-1)
}

// TestPlacesKeptWhenTheLeaderCannotKeepThem: while the leader's keeps
// fail, each waiter polls for itself again, and keeps its place.
func TestPlacesKeptWhenTheLeaderCannotKeepThem(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	k := placeKinds[0] // FairMutex: strict arrival order shows a lost place
	name := "places-keep-refused"
	release := holdFromAnotherClient(t, srv, k, name)
	const n = 6
	w := startPlaceWaiters(t, srv, k, name, n)
	queue := k.queue(w.c, name)
	w.waitKept(t, queue, 1, 1)
	w.counter.refuseKeep.Store(true)
	// The followers poll about every 300ms (half a refresh past the
	// leader's pace) instead: wait for 8 rounds of their polls, over four
	// waiter leases, counting the leader's attempts and refused keeps.
	start := w.counter.n.Load()
	deadline := time.Now().Add(30 * time.Second)
	for w.counter.n.Load()-start < 8*(n+1) {
		if time.Now().After(deadline) {
			t.Fatalf("%d script calls in 30s while the keeps fail; want %d", w.counter.n.Load()-start, 8*(n+1))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if live := liveWaiters(t, srv, queue, strings.TrimSuffix(queue, ":q")+":w"); live != n {
		t.Fatalf("%d waiters queued with a live lease; want %d", live, n)
	}
	release()
	w.wantArrivalOrder(t, 0, n)
}

// liveWaiters counts the members of queue whose lease in waiters has not
// ended on the server's clock.
func liveWaiters(t *testing.T, srv *redistest.Server, queue, waiters string) int {
	t.Helper()
	members, _ := srv.Do(t, "ZRANGE", queue, "0", "-1").([]any)
	now, _ := srv.Do(t, "TIME").([]any)
	var sec, usec int64
	fmt.Sscan(fmt.Sprint(now[0]), &sec)
	fmt.Sscan(fmt.Sprint(now[1]), &usec)
	nowMs := sec*1000 + usec/1000
	live := 0
	for _, m := range members {
		entry, _ := srv.Do(t, "HGET", waiters, fmt.Sprint(m)).(string)
		var expiry int64
		if _, err := fmt.Sscan(entry, &expiry); err == nil && expiry > nowMs {
			live++
		}
	}
	return live
}
