package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestReplicaAckRejectsBadInput(t *testing.T) {
	srv := redistest.Shared(t)
	rdb, counter := countingClient(t, srv)
	for label, opts := range map[string][]dlock.Option{
		"negative replicas":      {dlock.WithReplicaAck(-1, time.Second)},
		"negative timeout":       {dlock.WithReplicaAck(1, -time.Second)},
		"timeout as long as TTL": {dlock.WithTTL(time.Second), dlock.WithReplicaAck(1, time.Second)},
		"TTL set after":          {dlock.WithReplicaAck(1, 2*time.Second), dlock.WithTTL(time.Second)},
		"default timeout, TTL":   {dlock.WithReplicaAck(1, 0), dlock.WithTTL(500 * time.Millisecond)},
	} {
		if _, err := dlock.New(rdb, opts...); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("New with %s: %v, want ErrInvalidArgument", label, err)
		}
	}
	c, err := dlock.New(rdb, dlock.WithReplicaAck(0, 0)) // off
	if err != nil {
		t.Fatalf("WithReplicaAck(0, 0): %v", err)
	}
	defer c.Close()
	ctx := testCtx(t)
	bad := dlock.WithReplicaAck(1, time.Minute) // longer than the default TTL
	if _, err := c.Mutex("x", bad).TryLock(ctx); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Mutex: %v, want ErrInvalidArgument", err)
	}
	if _, err := c.RWMutex("x", bad).RLock(ctx); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("RWMutex: %v, want ErrInvalidArgument", err)
	}
	if _, err := c.Semaphore("x", 1, bad).TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Semaphore: %v, want ErrInvalidArgument", err)
	}
	if n := counter.n.Load(); n != 0 {
		t.Errorf("rejected options sent %d commands", n)
	}

	nodes := redistest.SharedNodeAddrs(1)
	if _, err := dlock.NewRedlock([]dlock.RedisClient{redlockNodeClient(t, nodes[0])}, dlock.WithReplicaAck(1, 0)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("NewRedlock with WithReplicaAck: %v, want ErrInvalidArgument", err)
	}
	rl := newRedlock(t, nodes)
	if _, err := rl.Mutex("x", dlock.WithReplicaAck(1, 0)).TryLock(ctx); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Redlock.Mutex with WithReplicaAck: %v, want ErrInvalidArgument", err)
	}
}

// ackCase is one way to acquire under replica acknowledgement.
type ackCase struct {
	name    string
	kind    dlock.Kind
	acquire func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.Option) (release func(), err error)
}

var ackCases = []ackCase{
	{"Mutex", dlock.KindMutex, func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.Option) (func(), error) {
		l, err := c.Mutex(name, opts...).TryLock(ctx)
		return func() { unlockLease(l) }, err
	}},
	{"Mutex.Lock", dlock.KindMutex, func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.Option) (func(), error) {
		l, err := c.Mutex(name, opts...).Lock(ctx)
		return func() { unlockLease(l) }, err
	}},
	{"FairMutex.Lock", dlock.KindMutex, func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.Option) (func(), error) {
		l, err := c.FairMutex(name, opts...).Lock(ctx)
		return func() { unlockLease(l) }, err
	}},
	{"ReentrantMutex", dlock.KindReentrant, func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.Option) (func(), error) {
		l, err := c.ReentrantMutex(name, opts...).Lock(dlock.WithOwner(ctx, "job"))
		return func() { unlockLease(l) }, err
	}},
	{"RWMutex.Lock", dlock.KindRWMutex, func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.Option) (func(), error) {
		l, err := c.RWMutex(name, opts...).Lock(ctx)
		return func() { unlockLease(l) }, err
	}},
	{"RWMutex.RLock", dlock.KindRWMutex, func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.Option) (func(), error) {
		l, err := c.RWMutex(name, opts...).RLock(ctx)
		return func() { unlockLease(l) }, err
	}},
	{"Semaphore", dlock.KindSemaphore, func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.Option) (func(), error) {
		p, err := c.Semaphore(name, 3, opts...).Acquire(ctx, 2)
		return func() { releasePermits(p) }, err
	}},
	{"MultiLock", dlock.KindMutex, func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.Option) (func(), error) {
		l, err := c.MultiLock(name, name+"-2").With(opts...).Lock(ctx)
		return func() { unlockLease(l) }, err
	}},
}

// TestReplicaAckAcquire takes every kind of lock with acknowledgement from
// both replicas of a master: it succeeds while they run, and with one
// paused it fails with ErrReplicaAck after the WAIT timeout, holding
// nothing.
func TestReplicaAckAcquire(t *testing.T) {
	t.Parallel()
	rep := redistest.StartReplicated(t, 2)
	const timeout = 200 * time.Millisecond
	c := newClient(t, rep.Master, dlock.WithReplicaAck(2, timeout))
	ctx := testCtx(t)
	for _, tc := range ackCases {
		name := uniqueName(t) + tc.name
		release, err := tc.acquire(ctx, c, name)
		if err != nil {
			t.Fatalf("%s with both replicas running: %v", tc.name, err)
		}
		if tc.kind == dlock.KindMutex {
			// WAIT returned: both replicas have the lock's value.
			want := rep.Master.Do(t, "GET", lockKey(name))
			for _, r := range rep.Replicas {
				if got := r.Do(t, "GET", lockKey(name)); got != want {
					t.Errorf("%s: replica %s has %v, the master %v", tc.name, r.Addr(), got, want)
				}
			}
		}
		release()
	}

	rep.Replicas[1].Pause()
	defer rep.Replicas[1].Resume()
	for _, tc := range ackCases {
		name := uniqueName(t) + tc.name
		start := time.Now()
		_, err := tc.acquire(ctx, c, name)
		took := time.Since(start)
		if !errors.Is(err, dlock.ErrReplicaAck) {
			t.Errorf("%s with a replica paused: %v, want ErrReplicaAck", tc.name, err)
			continue
		}
		if !strings.Contains(err.Error(), "1 of 2 replicas") {
			t.Errorf("%s: %q does not say how many replicas acknowledged", tc.name, err)
		}
		if took < timeout*4/5 {
			t.Errorf("%s failed after %v, before the WAIT timeout of %v", tc.name, took, timeout)
		}
		for _, info := range mustInspect(t, c, name) {
			if info.Kind == tc.kind && len(info.Holders) != 0 {
				t.Errorf("%s: still held after ErrReplicaAck: %+v", tc.name, info.Holders)
			}
		}
	}
}

// TestReplicaAckHandOff queues a waiter that requires acknowledgement and
// one that does not behind a holder, with a replica paused. The lock handed
// to the first is claimed with WAIT, which fails, so it passes on to the
// second, and the first's Lock reports ErrReplicaAck.
func TestReplicaAckHandOff(t *testing.T) {
	rep := redistest.StartReplicated(t, 1)
	ctx := testCtx(t)
	name := uniqueName(t)
	a := newClient(t, rep.Master)
	b := newClient(t, rep.Master, dlock.WithReplicaAck(1, 200*time.Millisecond))
	c := newClient(t, rep.Master)
	held := mustLock(t, a, name)
	acked := make(chan error, 1)
	go func() {
		l, err := b.FairMutex(name).Lock(ctx)
		if err == nil {
			unlockLease(l)
		}
		acked <- err
	}()
	waitQueued(t, rep.Master, name, 1)
	plain := goLock(t, c.FairMutex(name).Lock)
	waitQueued(t, rep.Master, name, 2)

	rep.Replicas[0].Pause()
	defer rep.Replicas[0].Resume()
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-acked:
		if !errors.Is(err, dlock.ErrReplicaAck) {
			t.Errorf("Lock handed a lock its replica cannot acknowledge: %v, want ErrReplicaAck", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter requiring acknowledgement never returned")
	}
	l := plain.await(t, 10*time.Second, "the next waiter, after the first gave the lock back")
	if l.Token() <= held.Token() {
		t.Errorf("token %d after %d", l.Token(), held.Token())
	}
}

// TestReplicaAckRenewal pauses the replica under a held lease: renewals
// still re-arm the key on the master, but without acknowledgement they
// must not extend the lease, which is lost at its deadline. Extend reports
// ErrReplicaAck.
func TestReplicaAckRenewal(t *testing.T) {
	t.Parallel()
	rep := redistest.StartReplicated(t, 1)
	ctx := testCtx(t)
	const ttl = 600 * time.Millisecond
	c := newClient(t, rep.Master, dlock.WithTTL(ttl), dlock.WithReplicaAck(1, 50*time.Millisecond))
	name := uniqueName(t)

	// Renewed with acknowledgement: it outlives several TTLs.
	l := mustLock(t, c, name)
	deadline := dlock.LeaseValidUntil(l)
	waitFor(t, 10*time.Second, func() bool { return dlock.LeaseValidUntil(l).After(deadline.Add(2 * ttl)) },
		"acknowledged renewals")

	rep.Replicas[0].Pause()
	defer rep.Replicas[0].Resume()
	if err := l.Extend(ctx, ttl); !errors.Is(err, dlock.ErrReplicaAck) {
		t.Errorf("Extend with the replica paused: %v, want ErrReplicaAck", err)
	}
	paused := time.Now()
	waitDone(t, l, 10*time.Second)
	if !errors.Is(l.Err(), dlock.ErrLockLost) {
		t.Errorf("Err = %v, want ErrLockLost", l.Err())
	}
	if lost := time.Since(paused); lost > ttl+500*time.Millisecond {
		t.Errorf("lost %v after the pause, beyond the TTL %v", lost, ttl)
	}
	// The master kept re-arming the key all along: only the missing
	// acknowledgements ended the lease.
	if pttl, _ := rep.Master.Do(t, "PTTL", lockKey(name)).(int64); pttl <= 0 {
		t.Errorf("the key's PTTL on the master is %d: the renewals did not re-arm it", pttl)
	}
}
