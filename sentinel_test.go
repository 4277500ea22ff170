package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// failoverClient returns a dlock Client over a go-redis failover client of
// its own (as another process would have), with context deadlines honoured
// and short dial and read timeouts, as a deployment that fails over should
// configure it.
func failoverClient(t testing.TB, g *redistest.SentinelGroup, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            g.MasterName,
		SentinelAddrs:         g.SentinelAddrs(),
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		ReadTimeout:           2 * time.Second,
		WriteTimeout:          2 * time.Second,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatalf("dlock.New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestSentinelFailover kills the master under a held lease and a waiting
// Lock, and checks that once Sentinel has promoted a replica everything
// works again without the caller doing anything: the failover client
// reconnects to the new master, whose script cache is empty (EVALSHA
// answers NOSCRIPT, and the driver sends EVAL), the subscription follows
// it, and the watchdog's renewals resume. The lease was acknowledged by a
// replica (WithReplicaAck), and Sentinel promotes the replica that has
// processed the most of the master's stream, so it survives the failover.
func TestSentinelFailover(t *testing.T) {
	g := redistest.StartSentinel(t, 2)
	ctx := testCtx(t)
	ack := dlock.WithReplicaAck(1, time.Second)
	a := failoverClient(t, g, dlock.WithTTL(10*time.Second), ack, dlock.WithOwnerInfo("a"))
	b := failoverClient(t, g, dlock.WithOwnerInfo("b"))
	name := uniqueName(t)
	kept := mustLock(t, a, name+"kept")
	handed := mustLock(t, a, name+"handed")
	next := goLock(t, b.Mutex(name+"handed").Lock)
	waitWaiters(t, a, name+"handed", dlock.KindMutex, 1)

	old := g.Master
	old.Kill()
	killed := time.Now()
	promoted := g.WaitForFailover(t, old, 30*time.Second)
	t.Logf("%s promoted %v after the kill", promoted.Addr(), time.Since(killed).Round(time.Millisecond))
	if promoted.Do(t, "GET", lockKey(name+"kept")) != dlock.LeaseOwner(kept) {
		t.Fatalf("the promoted replica lost an acknowledged lock")
	}
	// The other replica follows the new master once Sentinel has told it;
	// until then nothing could be acknowledged.
	waitFor(t, 30*time.Second, func() bool {
		info, _ := promoted.Do(t, "INFO", "replication").(string)
		return strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	}, "the remaining replica to follow the new master")

	// The watchdog renews kept on the new master by itself.
	waitFor(t, 20*time.Second, func() bool {
		return dlock.LeaseValidUntil(kept).After(time.Now().Add(8 * time.Second))
	}, "a renewal of the held lease on the new master")
	select {
	case <-kept.Done():
		t.Fatalf("the held lease was lost in the failover: %v", kept.Err())
	default:
	}
	if _, err := b.Mutex(name + "kept").TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("TryLock of the held lock on the new master: %v, want ErrNotObtained", err)
	}
	if d, err := kept.TTL(ctx); err != nil || d < 5*time.Second {
		t.Errorf("TTL on the new master = %v, %v", d, err)
	}
	if err := kept.Extend(ctx, 10*time.Second); err != nil {
		t.Errorf("Extend on the new master: %v", err)
	}

	// The waiter's subscription reconnected to the new master: the release
	// hands it the lock there.
	l := handOff(t, handed, next)
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock of the handed-over lease: %v", err)
	}
	for i, c := range []*dlock.Client{a, b} {
		fresh := fmt.Sprintf("%sfresh-%d", name, i)
		l, err := c.Mutex(fresh).TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock on the new master: %v", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock on the new master: %v", err)
		}
		l, err = c.Mutex(fresh).Lock(ctx)
		if err != nil {
			t.Fatalf("Lock on the new master: %v", err)
		}
		unlockLease(l)
	}
	if err := kept.Unlock(ctx); err != nil {
		t.Errorf("Unlock of the lease held across the failover: %v", err)
	}
}

// A failover away from a master that stops answering without closing its
// connections (frozen here; cut off by the network alike): the waiter's
// subscription must move to the promoted replica promptly, so that the
// release there wakes it. go-redis moves command connections on Sentinel's
// +switch-master but not a PubSub's; the subscription stayed on the frozen
// master until its health check gave up, and the waiter, which polls only
// every 20 s here, was served about 7 s after the release.
func TestSentinelFailoverFromAFrozenMasterWakesWaiters(t *testing.T) {
	// Not beside other tests: how soon the waiter's subscription leaves
	// the frozen master depends on when its health check and Sentinel's
	// failover fall against each other, and with four tests at a time it
	// was once served 7.5 s after the release (in 10 runs).
	g := redistest.StartSentinel(t, 1)
	a := failoverClient(t, g, dlock.WithTTL(20*time.Second), dlock.WithReplicaAck(1, time.Second), dlock.WithOwnerInfo("a"))
	b := failoverClient(t, g, dlock.WithWaiterLease(time.Minute), dlock.WithOwnerInfo("b"))
	name := uniqueName(t)
	held := mustLock(t, a, name) // acknowledged by the replica: it survives the failover
	next := goLock(t, b.Mutex(name).Lock)
	waitWaiters(t, a, name, dlock.KindMutex, 1)

	old := g.Master
	old.Pause()
	t.Cleanup(old.Resume)
	promoted := g.WaitForFailover(t, old, 30*time.Second)
	if promoted.Do(t, "GET", lockKey(name)) != dlock.LeaseOwner(held) {
		t.Fatal("the promoted replica lost an acknowledged lock")
	}
	// The holder's command connections follow the promotion; a release
	// sent to the frozen master first fails, and is sent again.
	waitFor(t, 20*time.Second, func() bool {
		uctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return held.Unlock(uctx) == nil
	}, "the release on the new master")
	released := time.Now()
	l := next.await(t, 25*time.Second, "the waiter")
	if took := time.Since(released); took > 3*time.Second {
		t.Errorf("the waiter was served %v after the release: not by the grant message, which its subscription missed", took.Round(time.Millisecond))
	}
	unlockLease(l)
}
