package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestRedlockMutualExclusion(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	addrs := addrsOf(servers)
	const workers, rounds = 4, 12
	var (
		counter atomic.Int64 // read and written non-atomically below, on purpose
		inside  atomic.Int32
		wg      sync.WaitGroup
	)
	ctx := testCtx(t)
	for w := 0; w < workers; w++ {
		// One Redlock per worker, each with its own pools: separate
		// processes. The node timeout is one a loaded machine meets under
		// -race: the default for this TTL (TTL/100, 50ms) is missed there,
		// and an Unlock then leaves that node's key to its TTL, or fails
		// with ErrQuorum.
		r := newRedlock(t, addrs, dlock.WithTTL(5*time.Second), dlock.WithNodeTimeout(time.Second),
			dlock.WithRetryDelay(time.Millisecond, 10*time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := r.Mutex(t.Name())
			for i := 0; i < rounds; i++ {
				lease, err := m.Lock(ctx)
				if err != nil {
					t.Errorf("Lock: %v", err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				v := counter.Load()
				time.Sleep(time.Millisecond) // widen the window for a lost update
				counter.Store(v + 1)
				inside.Add(-1)
				if err := lease.Unlock(ctx); err != nil {
					t.Errorf("Unlock: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if got := counter.Load(); got != workers*rounds {
		t.Errorf("counter = %d, want %d: updates were lost", got, workers*rounds)
	}
	wantNoKey(t, servers, lockKey(t.Name()))
}

// TestRedlockTakesAFreeKeyWithANativeSet: an uncontended Lock takes each
// node's free key with one SET NX PX and runs no script there (a script's
// fixed cost is a large share of a lock+unlock's work per node); the Unlock's release
// script is the only one. A key held by another owner still gets the
// script, which tells the holder and its remaining time.
func TestRedlockTakesAFreeKeyWithANativeSet(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	r := newRedlock(t, addrsOf(servers))
	ctx := testCtx(t)
	name := t.Name()
	// Dial, and load the release script, before counting.
	warm, err := r.Mutex(name + "-warm").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		s.Do(t, "CONFIG", "RESETSTAT")
	}
	l, err := r.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for i, s := range servers {
		stats, _ := s.Do(t, "INFO", "commandstats").(string)
		if !strings.Contains(stats, "cmdstat_set:calls=1,") || !strings.Contains(stats, "cmdstat_evalsha:calls=1,") {
			t.Errorf("node %d: want one SET and one script (the release); commandstats:\n%s", i, stats)
		}
	}

	// Held by another owner: the attempt reports the holder's time.
	other := newRedlock(t, addrsOf(servers))
	held, err := other.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Mutex(name).TryLock(ctx)
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock of a held lock: %v, want ErrNotObtained", err)
	}
	if !strings.Contains(err.Error(), "held by another owner for") {
		t.Errorf("TryLock of a held lock: %v; want it to say how long the holder has left", err)
	}

	// Once r has waited for the lock, it still listens for its releases
	// (the subscription lingers): the lock is contended, and r asks with
	// the script at once, which answers a taken key in one round trip.
	got := startRedlockLock(ctx, r, name)
	waitFor(t, 10*time.Second, func() bool { return dlock.RedlockGateHears(r, name) }, "the waiting Lock to listen for releases")
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-got
	if res.err != nil {
		t.Fatal(res.err)
	}
	if err := res.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		s.Do(t, "CONFIG", "RESETSTAT")
	}
	if l, err = r.Mutex(name).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for i, s := range servers {
		stats, _ := s.Do(t, "INFO", "commandstats").(string)
		if !strings.Contains(stats, "cmdstat_evalsha:calls=2,") {
			t.Errorf("node %d, after a wait: want two scripts (acquire and release) and no native SET; commandstats:\n%s", i, stats)
		}
	}
}

func TestRedlockLeaseSemantics(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	r := newRedlock(t, addrsOf(servers), dlock.WithTTL(10*time.Second))
	ctx := testCtx(t)
	name := t.Name()
	m := r.Mutex(name)
	if m.Name() != name {
		t.Errorf("Name() = %q", m.Name())
	}
	lease, err := m.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	if lease.Token() != 0 {
		t.Errorf("Token() = %d, want 0: Redlock has no fencing token", lease.Token())
	}
	if lease.Name() != name || lease.Err() != nil {
		t.Errorf("Name() = %q, Err() = %v", lease.Name(), lease.Err())
	}
	// The owner value is on every node, under the Mutex's key layout.
	waitFor(t, 10*time.Second, func() bool {
		vals := holdersOf(t, servers, lockKey(name))
		for _, v := range vals {
			if v == "" || v != vals[0] {
				return false
			}
		}
		return true
	}, "one owner value on every node")
	if d, err := lease.TTL(ctx); err != nil || d <= 9*time.Second || d > 10*time.Second {
		t.Errorf("TTL() = %v, %v; want about 10s", d, err)
	}

	_, err = r.Mutex(name).TryLock(ctx)
	if !errors.Is(err, dlock.ErrNotObtained) || errors.Is(err, dlock.ErrQuorum) {
		t.Errorf("second TryLock: got %v, want ErrNotObtained only", err)
	}
	if !strings.Contains(err.Error(), "held by another owner") {
		t.Errorf("the error does not say how long the holder keeps it: %v", err)
	}

	if err := lease.Extend(ctx, 20*time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if d, err := lease.TTL(ctx); err != nil || d <= 19*time.Second {
		t.Errorf("TTL() after Extend(20s) = %v, %v", d, err)
	}
	for i, s := range servers {
		waitFor(t, 10*time.Second, func() bool {
			return s.Do(t, "PTTL", lockKey(name)).(int64) > 19000
		}, fmt.Sprintf("node %d's PTTL above 19 s after Extend(20s)", i))
	}

	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	select {
	case <-lease.Done():
	default:
		t.Error("Done is not closed after Unlock")
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Err() after Unlock = %v, want ErrNotHeld", err)
	}
	if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Unlock: got %v, want ErrNotHeld", err)
	}
	wantNoKey(t, servers, lockKey(name))
	if _, err := lease.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("TTL after Unlock: got %v, want ErrNotHeld", err)
	}
}

func TestRedlockUnlockWithCancelledContext(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	r := newRedlock(t, addrsOf(servers))
	ctx, cancel := context.WithCancel(context.Background())
	lease, err := r.Mutex(t.Name()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with a cancelled context: %v", err)
	}
	wantNoKey(t, servers, lockKey(t.Name()))

	// Not ErrNotObtained: for a TryLock that says somebody holds the lock.
	if _, err := r.Mutex(t.Name()).TryLock(ctx); errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Errorf("TryLock with a cancelled context: got %v, want context.Canceled and not ErrNotObtained", err)
	}
}

func TestRedlockLockWaitsAndTimesOut(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	addrs := addrsOf(servers)
	holderRL := newRedlock(t, addrs)
	waiterRL := newRedlock(t, addrs, dlock.WithRetryDelay(5*time.Millisecond, 20*time.Millisecond))
	ctx := testCtx(t)
	name := t.Name()
	held, err := holderRL.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}

	short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	_, err = waiterRL.Mutex(name).Lock(short)
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dlock.ErrQuorum) {
		t.Fatalf("Lock on a held lock until the deadline: got %v, want ErrNotObtained and DeadlineExceeded", err)
	}

	released := make(chan time.Time, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		released <- time.Now()
		if err := held.Unlock(ctx); err != nil {
			t.Errorf("Unlock: %v", err)
		}
	}()
	lease, err := waiterRL.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	// The waiter retries at most every 20ms once its delay has grown.
	if wait := time.Since(<-released); wait > time.Second {
		t.Errorf("the waiter took the lock %v after its release", wait)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
}

func TestRedlockDo(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	r := newRedlock(t, addrsOf(servers), dlock.WithTTL(600*time.Millisecond), dlock.WithNodeTimeout(100*time.Millisecond))
	ctx := testCtx(t)
	name := t.Name()
	errFn := errors.New("fn failed")
	err := r.Do(ctx, name, func(ctx context.Context) error {
		if _, err := r.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("inside Do the lock is not held: %v", err)
		}
		return errFn
	})
	if !errors.Is(err, errFn) {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
	wantNoKey(t, servers, lockKey(name))

	if err := r.Do(ctx, name, nil); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Do(nil fn): got %v, want ErrInvalidArgument", err)
	}
	if err := r.Do(ctx, "", func(context.Context) error { return nil }); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Do with a bad name: got %v, want ErrInvalidArgument", err)
	}

	// Losing the lock (its key deleted on a quorum of nodes) cancels fn's ctx.
	err = r.Do(ctx, name, func(ctx context.Context) error {
		waitAllHold(t, servers, lockKey(name))
		servers[0].Do(t, "DEL", lockKey(name))
		servers[1].Do(t, "DEL", lockKey(name))
		select {
		case <-ctx.Done():
			if !errors.Is(context.Cause(ctx), dlock.ErrLockLost) {
				t.Errorf("fn's ctx cause = %v, want ErrLockLost", context.Cause(ctx))
			}
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("fn's ctx was not cancelled")
		}
	})
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Do after the loss: got %v, want ErrLockLost", err)
	}
	wantNoKey(t, servers, lockKey(name)) // the minority share is released too
}

func TestRedlockLockerSwitchesBackends(t *testing.T) {
	t.Parallel()
	servers := redistest.StartNodes(t, 3)
	r := newRedlock(t, addrsOf(servers))
	c := newClient(t, redistest.Shared(t))
	ctx := testCtx(t)
	for _, lk := range []dlock.Locker{c.Mutex(t.Name()), r.Mutex(t.Name())} {
		lease, err := lk.Lock(ctx)
		if err != nil {
			t.Fatalf("%T.Lock: %v", lk, err)
		}
		if _, err := lk.TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("%T.TryLock while held: %v", lk, err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Errorf("%T: Unlock: %v", lk, err)
		}
	}
}

func TestRedlockHeldByAnotherOwner(t *testing.T) {
	servers := redistest.StartNodes(t, 5)
	r := newRedlock(t, addrsOf(servers))
	ctx := testCtx(t)
	key := lockKey(t.Name())

	// Another owner on 2 of 5: a quorum of 3 is still ours; its keys stay.
	for _, s := range servers[:2] {
		s.Do(t, "SET", key, "someone-else", "PX", 30000)
	}
	lease, err := r.Mutex(t.Name()).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with 2 of 5 held by another owner: %v", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	vals := holdersOf(t, servers, key)
	if vals[0] != "someone-else" || vals[1] != "someone-else" || vals[2]+vals[3]+vals[4] != "" {
		t.Fatalf("after Unlock: %q", vals)
	}

	// Another owner on 3 of 5: not obtained, and the 2 nodes we got are
	// given back.
	servers[2].Do(t, "SET", key, "someone-else", "PX", 30000)
	_, err = r.Mutex(t.Name()).TryLock(ctx)
	if !errors.Is(err, dlock.ErrNotObtained) || errors.Is(err, dlock.ErrQuorum) {
		t.Fatalf("TryLock with 3 of 5 held: got %v, want ErrNotObtained", err)
	}
	vals = holdersOf(t, servers, key)
	if vals[0]+vals[1]+vals[2] != strings.Repeat("someone-else", 3) || vals[3]+vals[4] != "" {
		t.Errorf("partial acquisition not rolled back: %q", vals)
	}
}

// TestRedlockRenewalOutlivesSeveralTTLs: the watchdog keeps a Redlock
// lease held across four TTLs. The TTL leaves each renewal (a third of it,
// each node's call bounded by the node timeout) room on a loaded machine.
func TestRedlockRenewalOutlivesSeveralTTLs(t *testing.T) {
	t.Parallel()
	servers := redistest.StartNodes(t, 3)
	const ttl = time.Second
	r := newRedlock(t, addrsOf(servers), dlock.WithTTL(ttl), dlock.WithNodeTimeout(300*time.Millisecond))
	ctx := testCtx(t)
	lease, err := r.Mutex(t.Name()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * ttl)
	if err := lease.Err(); err != nil {
		t.Fatalf("lease lost while renewing: %v", err)
	}
	// A node that missed renewals under load may have let its share expire
	// (renewal never re-creates a key), but a quorum must hold it.
	held := 0
	for _, v := range holdersOf(t, servers, lockKey(t.Name())) {
		if v != "" {
			held++
		}
	}
	if held < 2 {
		t.Errorf("%d of 3 nodes hold the key of a lease that is not lost", held)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
}

func TestRedlockClose(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	addrs := addrsOf(servers)
	r := newRedlock(t, addrs)
	ctx := testCtx(t)
	lease, err := r.Mutex(t.Name()).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := r.Mutex(t.Name()).Lock(ctx)
		waiting <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waiting:
		if !errors.Is(err, dlock.ErrClosed) || !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("Lock waiting at Close: got %v, want ErrClosed and ErrNotObtained", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a waiting Lock")
	}
	waitDone(t, lease, time.Second)
	if err := lease.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("lease after Close: %v, want ErrLockLost", err)
	}
	if _, err := r.Mutex(t.Name()).TryLock(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TryLock after Close: got %v, want ErrClosed", err)
	}
	// Unlock still releases after Close.
	_ = lease.Unlock(ctx)
	wantNoKey(t, servers, lockKey(t.Name()))
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
