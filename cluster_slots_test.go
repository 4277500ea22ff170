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

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// replicaOf returns the replica of master.
func replicaOf(t testing.TB, cl *redistest.Cluster, master *redistest.Server) *redistest.Server {
	t.Helper()
	for _, r := range cl.Replicas(t) {
		info, _ := r.Do(t, "INFO", "replication").(string)
		if strings.Contains(info, fmt.Sprintf("master_port:%d\r\n", master.Port())) {
			return r
		}
	}
	t.Fatalf("no replica follows %s", master.Addr())
	return nil
}

// testClusterReplicaAck pauses the replica of one master: acquisitions of
// locks on that master fail with ErrReplicaAck and leave nothing held,
// while those on the other masters succeed, which they could not if WAIT
// ran anywhere but on the connection that wrote the lock. Renewals and
// hand-offs with WAIT work across the masters too.
func testClusterReplicaAck(t *testing.T, cl *redistest.Cluster) {
	ctx := testCtx(t)
	ack := dlock.WithReplicaAck(1, 300*time.Millisecond)
	a := clusterClient(t, cl, ack, dlock.WithTTL(2*time.Second))
	b := clusterClient(t, cl, ack, patient)
	names := spreadNames(t, cl, uniqueName(t))
	masterOf := func(name string) *redistest.Server {
		return cl.MasterForSlot(t, redistest.KeySlot(lockKey(name)))
	}

	// Held across the pause, on another master: renewed with WAIT there.
	kept := mustLock(t, a, names[1])
	replica := replicaOf(t, cl, masterOf(names[0]))
	replica.Pause()
	defer replica.Resume()
	_, err := a.Mutex(names[0]).TryLock(ctx)
	if !errors.Is(err, dlock.ErrReplicaAck) {
		t.Fatalf("TryLock with the master's replica paused: %v, want ErrReplicaAck", err)
	}
	if infos := mustInspect(t, a, names[0]); len(infos) == 1 && len(infos[0].Holders) != 0 {
		t.Errorf("a lock too few replicas acknowledged is still held: %+v", infos[0].Holders)
	}
	if l, err := a.Mutex(names[2]).TryLock(ctx); err != nil {
		t.Errorf("TryLock on %s, whose replica runs: %v", masterOf(names[2]).Addr(), err)
	} else {
		unlockLease(l)
	}
	// A renewal of kept (TTL 2s, renewed every 667 ms) falls within the
	// pause, which stays well below the cluster's node timeout (2 s).
	deadline := dlock.LeaseValidUntil(kept)
	waitFor(t, 10*time.Second, func() bool { return dlock.LeaseValidUntil(kept).After(deadline.Add(300 * time.Millisecond)) },
		"a renewal of kept on a master whose replica runs")
	replica.Resume()

	// A hand-off to a waiter that wants WAIT: it claims the lock through
	// its own connection to the master before Lock returns.
	next := goLock(t, b.Mutex(names[1]).Lock)
	waitWaiters(t, a, names[1], dlock.KindMutex, 1)
	l := handOff(t, kept, next)
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
	if l, err := a.Mutex(names[0]).TryLock(ctx); err != nil {
		t.Errorf("TryLock after the replica resumed: %v", err)
	} else {
		unlockLease(l)
	}

	// A slot moved since the client last looked: the first call with WAIT
	// meets MOVED, which the driver follows itself.
	c := clusterClient(t, cl, ack)
	if l, err := c.Mutex(names[2]).TryLock(ctx); err != nil {
		t.Fatalf("TryLock: %v", err)
	} else {
		unlockLease(l)
	}
	slot := redistest.KeySlot(lockKey(names[2]))
	cl.MigrateSlot(t, slot, otherMaster(t, cl, slot))
	l, err = c.Mutex(names[2]).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after its slot moved: %v", err)
	}
	if err := l.Extend(ctx, time.Second); err != nil {
		t.Errorf("Extend after its slot moved: %v", err)
	}
	unlockLease(l)
}

// otherMaster returns a master that does not serve slot.
func otherMaster(t testing.TB, cl *redistest.Cluster, slot int) *redistest.Server {
	t.Helper()
	owner := cl.MasterForSlot(t, slot)
	for _, m := range cl.Masters(t) {
		if m != owner {
			return m
		}
	}
	t.Fatalf("no master besides %s", owner.Addr())
	return nil
}

// testClusterSlotMigrationDuringWait moves the slot of a lock while a
// patient waiter waits for it: the waiter's subscription must follow the
// slot to its new master (Redis drops it at the old one), so that the
// release, published there, still wakes it promptly.
func testClusterSlotMigrationDuringWait(t *testing.T, cl *redistest.Cluster) {
	ctx := testCtx(t)
	a := clusterClient(t, cl)
	b := clusterClient(t, cl, patient)
	name := uniqueName(t)
	channel := lockKey(name)
	slot := redistest.KeySlot(channel)
	held := mustLock(t, a, name)
	next := goLock(t, b.Mutex(name).Lock)
	waitShardSubscribers(t, cl, channel, 1)
	from := cl.MasterForSlot(t, slot)
	to := otherMaster(t, cl, slot)
	cl.MigrateSlot(t, slot, to)
	waitShardSubscribers(t, cl, channel, 1) // at the new master
	if n, _ := shardSubscribers(t, from, channel); n != 0 {
		t.Errorf("the old master still counts %d subscribers", n)
	}
	if !next.pending() {
		t.Fatalf("the waiter got the lock while it was held")
	}
	l := handOff(t, held, next)
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
}

// redirected reports whether err shows a Cluster redirection, which must
// never reach a caller.
func redirected(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "MOVED") || strings.Contains(err.Error(), "ASK "))
}

// testClusterResharding moves the slot of two locks between masters while
// goroutines of two clients (one with replica acknowledgement, whose calls
// follow redirections in the driver, one without, where go-redis follows
// them) take, extend and release one of them, and a lease of each client
// on the other is renewed. Between the moves the slot stays half-migrated
// for a while (ASK), with the held leases' keys already on the target. No
// redirection may reach a caller, no two goroutines may hold the lock at
// once, and the held leases must survive.
func testClusterResharding(t *testing.T, cl *redistest.Cluster) {
	ctx := testCtx(t)
	a := clusterClient(t, cl, dlock.WithReplicaAck(1, 500*time.Millisecond))
	b := clusterClient(t, cl)
	tag := strings.TrimSuffix(uniqueName(t), ":")
	busy := "{" + tag + "}:busy"
	held := []string{"{" + tag + "}:held-a", "{" + tag + "}:held-b"}
	slot := redistest.KeySlot(lockKey(busy))

	short := dlock.WithTTL(600 * time.Millisecond) // renewed every 200 ms
	var leases []*dlock.Lease
	for i, c := range []*dlock.Client{a, b} {
		leases = append(leases, mustLock(t, c, held[i], short))
	}

	var w reshardWorkers
	w.stop = make(chan struct{})
	for i := 0; i < 4; i++ {
		w.wg.Add(1)
		go w.run(ctx, []*dlock.Client{a, b}[i%2], busy, short)
	}

	movedAfter := func(l *dlock.Lease, at time.Time) func() bool {
		// A renewal that started after at succeeded: validity is the
		// renewal's start + 600 ms - drift (600/100 + 2 ms).
		return func() bool { return dlock.LeaseValidUntil(l).After(at.Add(592 * time.Millisecond)) }
	}
	for round := 0; round < 3; round++ {
		before := w.sections.Load()
		waitFor(t, 10*time.Second, func() bool { return w.sections.Load() >= before+5 }, "sections between the moves")
		cl.MigrateSlot(t, slot, otherMaster(t, cl, slot))

		// Half-migrated: the held leases' keys on the target, the rest on
		// the source. Their renewals (one key each) go there by ASK.
		w.paused.Lock()
		m := cl.StartMigration(t, slot, otherMaster(t, cl, slot))
		m.MoveKeys(t, lockKey(held[0]), lockKey(held[1]))
		at := time.Now()
		for _, l := range leases {
			waitFor(t, 10*time.Second, movedAfter(l, at), "a renewal of "+l.Name()+" by ASK")
			if _, err := l.TTL(ctx); err != nil {
				t.Errorf("TTL of %s by ASK: %v", l.Name(), err)
			}
			if err := l.Extend(ctx, 600*time.Millisecond); err != nil {
				t.Errorf("Extend of %s by ASK: %v", l.Name(), err)
			}
		}
		m.Finish(t)
		w.paused.Unlock()
	}
	before := w.sections.Load()
	waitFor(t, 10*time.Second, func() bool { return w.sections.Load() >= before+5 }, "sections after the last move")
	close(w.stop)
	w.wg.Wait()

	for _, l := range leases {
		if err := l.Err(); err != nil {
			t.Errorf("%s was lost while its slot moved: %v", l.Name(), err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock of %s: %v", l.Name(), err)
		}
	}
	t.Logf("%d critical sections, %d TRYAGAIN replies seen by callers", w.sections.Load(), w.transient.Load())
	if n := w.overlaps.Load(); n != 0 {
		t.Errorf("%d critical sections overlapped", n)
	}
	for _, err := range w.failures {
		t.Error(err)
	}
}

// reshardWorkers run critical sections on one lock while its slot moves,
// and count what they saw.
type reshardWorkers struct {
	inside, sections, overlaps, transient atomic.Int64
	mu                                    sync.Mutex
	failures                              []error
	paused                                sync.RWMutex // held for writing while the slot is half-migrated
	stop                                  chan struct{}
	wg                                    sync.WaitGroup
}

// run takes c's Mutex of name with opt, again and again until stop, and
// in each section extends now and then and unlocks.
func (w *reshardWorkers) run(ctx context.Context, c *dlock.Client, name string, opt dlock.Option) {
	defer w.wg.Done()
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		w.paused.RLock()
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := c.Mutex(name, opt).Lock(lctx)
		cancel()
		if w.check("Lock", err) {
			if w.inside.Add(1) != 1 {
				w.overlaps.Add(1)
			}
			w.sections.Add(1)
			time.Sleep(time.Millisecond)
			if w.sections.Load()%3 == 0 {
				w.check("Extend", l.Extend(ctx, 600*time.Millisecond))
			}
			w.inside.Add(-1)
			w.check("Unlock", l.Unlock(ctx))
		}
		w.paused.RUnlock()
	}
}

// check reports whether err is nil. TRYAGAIN (a script naming a key
// missing on a node while its slot migrates) may reach Lock and Unlock if
// the migration outlasts their context (the driver retries until then):
// it is transient and counted, but a redirection is a failure.
func (w *reshardWorkers) check(what string, err error) bool {
	switch {
	case err == nil:
		return true
	case redirected(err):
		w.fail(fmt.Errorf("%s: a redirection reached the caller: %w", what, err))
	case strings.Contains(err.Error(), "TRYAGAIN"):
		w.transient.Add(1)
	default:
		w.fail(fmt.Errorf("%s: %w", what, err))
	}
	return false
}

// fail records err, for the test to report once the workers stop.
func (w *reshardWorkers) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failures = append(w.failures, err)
}

// testClusterSplitKeys takes a lock whose keys are split between the two
// masters of a slot being migrated: its fencing counter still on the
// source, the rest absent. Redis refuses the acquire script with TRYAGAIN
// until the migration ends; TryLock must wait for that (the driver retries
// until its context ends) rather than return the refusal.
func testClusterSplitKeys(t *testing.T, cl *redistest.Cluster) {
	ctx := testCtx(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	refused := newFailureSignal(func(_ redis.Cmder, err error) bool { return strings.HasPrefix(err.Error(), "TRYAGAIN") })
	rdb.AddHook(refused)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })

	name := uniqueName(t) + "split"
	// A first hold leaves the fencing counter behind: the key that stays on
	// the source while the others are absent.
	if err := mustLock(t, c, name).Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	slot := redistest.KeySlot(lockKey(name))
	m := cl.StartMigration(t, slot, otherMaster(t, cl, slot))

	type result struct {
		l   *dlock.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := c.Mutex(name).TryLock(ctx)
		done <- result{l, err}
	}()
	select {
	case <-refused.seen:
	case r := <-done:
		t.Fatalf("TryLock returned before any TRYAGAIN: %v, %v", r.l, r.err)
	case <-ctx.Done():
		t.Fatal("no TRYAGAIN while the lock's keys were split")
	}
	m.Finish(t)
	r := <-done
	if r.err != nil {
		t.Fatalf("TryLock across the migration: %v", r.err)
	}
	if err := r.l.Unlock(ctx); err != nil {
		t.Errorf("Unlock after the migration: %v", err)
	}
}
