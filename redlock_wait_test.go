package dlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// slowRetry makes a Redlock waiter that polled wait at least 5 s between
// attempts: a test that sees it take the lock sooner proves it was woken.
var slowRetry = dlock.WithRetryDelay(10*time.Second, 20*time.Second)

// holdElsewhere takes the lock called name through a Redlock of its own, as
// another process would.
func holdElsewhere(ctx context.Context, t *testing.T, addrs []string, name string) *dlock.Lease {
	t.Helper()
	held, err := newRedlock(t, addrs).Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	return held
}

// waitListening waits until a waiter listens for the lock called name's
// releases on every one of servers.
func waitListening(t *testing.T, servers []*redistest.Server, name string) {
	t.Helper()
	waitFor(t, 10*time.Second, func() bool {
		for _, s := range servers {
			if subscribers(t, s, name) == 0 {
				return false
			}
		}
		return true
	}, "waiter listening on every node")
}

// subscribers counts the pub/sub subscribers of the lock called name's
// channel on s.
func subscribers(t *testing.T, s *redistest.Server, name string) int64 {
	reply, _ := s.Do(t, "PUBSUB", "NUMSUB", lockKey(name)).([]any)
	if len(reply) != 2 {
		t.Fatalf("PUBSUB NUMSUB: unexpected reply %v", reply)
	}
	n, _ := reply[1].(int64)
	return n
}

// commandCalls is how many times s has run the commands named (lower case,
// as INFO commandstats names them).
func commandCalls(t *testing.T, s *redistest.Server, commands ...string) int64 {
	info, _ := s.Do(t, "INFO", "commandstats").(string)
	var total int64
	for _, line := range strings.Split(info, "\n") {
		for _, c := range commands {
			if !strings.HasPrefix(line, "cmdstat_"+c+":") {
				continue
			}
			_, rest, _ := strings.Cut(line, "calls=")
			calls, _, _ := strings.Cut(rest, ",")
			n, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				t.Fatalf("INFO commandstats: cannot read %q", line)
			}
			total += n
		}
	}
	return total
}

func TestRedlockWaiterWokenByRelease(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	checkWokenByRelease(t, addrsOf(servers), servers)
}

func TestRedlockWaiterWokenWithANodeDown(t *testing.T) {
	t.Parallel()
	servers := redistest.StartNodes(t, 3)
	servers[2].Kill()
	// Two live nodes of three: any holder's quorum includes one of them.
	checkWokenByRelease(t, addrsOf(servers), servers[:2])
}

// checkWokenByRelease holds a lock over addrs in one Redlock, waits until a
// Lock of another listens on the live nodes, releases, and checks that the
// waiter took the lock at once rather than after its retry delay.
func checkWokenByRelease(t *testing.T, addrs []string, live []*redistest.Server) {
	waiterRL := newRedlock(t, addrs, slowRetry)
	ctx := testCtx(t)
	name := t.Name()
	held := holdElsewhere(ctx, t, addrs, name)

	got := make(chan error, 1)
	go func() {
		lease, err := waiterRL.Mutex(name).Lock(ctx)
		if err == nil {
			err = lease.Unlock(ctx)
		}
		got <- err
	}()
	waitListening(t, live, name)
	released := time.Now()
	if err := held.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Lock, then Unlock: %v", err)
	}
	// Polling would have waited at least 5 s (slowRetry), and the holder's
	// key had 30 s left.
	if wait := time.Since(released); wait > 2*time.Second {
		t.Errorf("the waiter took the lock %v after its release; a release should wake it", wait)
	}
}

func TestRedlockWaiterTakesOverFromADeadHolder(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	r := newRedlock(t, addrsOf(servers), slowRetry)
	ctx := testCtx(t)
	name := t.Name()
	// A holder that died: its keys expire, and nobody publishes a release.
	const left = 400 * time.Millisecond
	set := time.Now() // no key can expire before set+left
	for _, s := range servers {
		s.Do(t, "SET", lockKey(name), "a dead holder", "PX", left.Milliseconds())
	}
	lease, err := r.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	defer func() { _ = lease.Unlock(ctx) }()
	// It looks again when the keys expire, not after its (slow) retry
	// delay; and not before, when they still held a quorum.
	if wait := time.Since(set); wait < left-5*time.Millisecond || wait > 3*time.Second {
		t.Errorf("Lock returned %v after the keys were set for %v; want soon after they expired", wait, left)
	}
}

func TestRedlockWaitersSendNothingBetweenReleases(t *testing.T) {
	t.Parallel()
	servers := redistest.StartNodes(t, 3)
	addrs := addrsOf(servers)
	ctx := testCtx(t)
	name := t.Name()
	held := holdElsewhere(ctx, t, addrs, name)
	defer func() { _ = held.Unlock(ctx) }()

	// Two processes with 20 waiters each, for 1.5 s, retrying every 10–40 ms
	// if they polled: hundreds of attempts per node.
	before := commandCalls(t, servers[0], "evalsha", "eval")
	wait, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for p := 0; p < 2; p++ {
		r := newRedlock(t, addrs, dlock.WithRetryDelay(10*time.Millisecond, 40*time.Millisecond))
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := r.Mutex(name).Lock(wait)
				errs <- err
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock on a held lock until the deadline: got %v, want ErrNotObtained and DeadlineExceeded", err)
		}
	}
	// One waiter per process attempts: once, and once more after
	// subscribing. The rest queue in their process.
	if calls := commandCalls(t, servers[0], "evalsha", "eval") - before; calls > 10 {
		t.Errorf("40 waiters in 2 processes sent %d script calls to one node in 1.5 s; want at most 10 (no polling)", calls)
	}
}

func TestRedlockLocalWaitersTakeTurnsInOrder(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	addrs := addrsOf(servers)
	r := newRedlock(t, addrs, slowRetry)
	ctx := testCtx(t)
	name := t.Name()
	held := holdElsewhere(ctx, t, addrs, name)

	const waiters = 5
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := 0; i < waiters; i++ {
		i := i
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := r.Mutex(name).Lock(ctx)
			if err != nil {
				t.Errorf("waiter %d: Lock: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := lease.Unlock(ctx); err != nil {
				t.Errorf("waiter %d: Unlock: %v", i, err)
			}
		}()
		waitFor(t, 10*time.Second, func() bool { n, _ := dlock.RedlockGateState(r, name); return n == i+1 }, "waiter "+strconv.Itoa(i)+" in line")
	}
	waitListening(t, servers, name)
	if err := held.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	wg.Wait()
	for i, w := range order {
		if w != i {
			t.Fatalf("waiters of one process took the lock in the order %v; want their arrival order", order)
		}
	}
	if len(order) != waiters {
		t.Fatalf("%d of %d waiters took the lock", len(order), waiters)
	}
	if n, _ := dlock.RedlockGateState(r, name); n != 0 {
		t.Errorf("%d Lock calls still in line after every waiter returned", n)
	}
}

func TestRedlockCloseEndsQueuedWaiters(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	addrs := addrsOf(servers)
	r := newRedlock(t, addrs)
	ctx := testCtx(t)
	name := t.Name()
	held := holdElsewhere(ctx, t, addrs, name)
	defer func() { _ = held.Unlock(ctx) }()

	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func() {
			_, err := r.Mutex(name).Lock(ctx)
			errs <- err
		}()
	}
	waitFor(t, 10*time.Second, func() bool { n, _ := dlock.RedlockGateState(r, name); return n == 3 }, "three waiters in line")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := <-errs; !errors.Is(err, dlock.ErrClosed) || !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("Lock ended by Close: got %v, want ErrClosed and ErrNotObtained", err)
		}
	}
}
