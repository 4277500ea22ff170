package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestRedlockKeyConflict(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	r := newRedlock(t, addrsOf(servers))
	ctx := testCtx(t)
	key := lockKey(t.Name())

	servers[0].Do(t, "RPUSH", key, "not a lock")
	lease, err := r.Mutex(t.Name()).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock with a foreign key on 1 of 3: %v", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}

	servers[1].Do(t, "SET", key, "no expiry")
	start := time.Now()
	_, err = r.Mutex(t.Name()).Lock(ctx)
	if !errors.Is(err, dlock.ErrQuorum) || !errors.Is(err, dlock.ErrKeyConflict) {
		t.Fatalf("Lock with foreign keys on 2 of 3: got %v, want ErrQuorum and ErrKeyConflict", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Lock took %v to give up on a conflict that cannot clear", d)
	}
	if got := servers[0].Do(t, "TYPE", key); got != "list" {
		t.Errorf("the foreign list was modified: TYPE = %v", got)
	}
	if got := servers[1].Do(t, "GET", key); got != "no expiry" {
		t.Errorf("the foreign string was modified: %v", got)
	}
	if got := servers[2].Do(t, "EXISTS", key); got != int64(0) {
		t.Error("the share on the free node was not given back")
	}
}

func TestNewRedlockRejectsBadInput(t *testing.T) {
	servers := redistest.StartNodes(t, 2)
	a, b := redlockNodeClient(t, servers[0].Addr()), redlockNodeClient(t, servers[1].Addr())
	a2 := redlockNodeClient(t, servers[0].Addr())
	var nilClient *redis.Client
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{servers[0].Addr()}})
	defer cluster.Close()
	failover := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{servers[1].Addr()}})
	defer failover.Close()
	nodes := []dlock.RedisClient{a, b}
	cases := map[string]func() error{
		"no nodes":         func() error { _, err := dlock.NewRedlock(nil); return err },
		"nil node":         func() error { _, err := dlock.NewRedlock([]dlock.RedisClient{a, nil}); return err },
		"typed nil node":   func() error { _, err := dlock.NewRedlock([]dlock.RedisClient{a, nilClient}); return err },
		"cluster node":     func() error { _, err := dlock.NewRedlock([]dlock.RedisClient{a, cluster}); return err },
		"failover node":    func() error { _, err := dlock.NewRedlock([]dlock.RedisClient{a, failover}); return err },
		"duplicate client": func() error { _, err := dlock.NewRedlock([]dlock.RedisClient{a, b, a}); return err },
		"duplicate addr":   func() error { _, err := dlock.NewRedlock([]dlock.RedisClient{a, b, a2}); return err },
		"nil option":       func() error { _, err := dlock.NewRedlock(nodes, nil); return err },
		"drift negative":   func() error { _, err := dlock.NewRedlock(nodes, dlock.WithDriftFactor(-0.1)); return err },
		"drift one":        func() error { _, err := dlock.NewRedlock(nodes, dlock.WithDriftFactor(1)); return err },
		"node timeout = TTL": func() error {
			_, err := dlock.NewRedlock(nodes, dlock.WithTTL(time.Second), dlock.WithNodeTimeout(time.Second))
			return err
		},
		"node timeout > TTL": func() error {
			_, err := dlock.NewRedlock(nodes, dlock.WithNodeTimeout(time.Minute))
			return err
		},
		"node timeout eats the validity": func() error {
			_, err := dlock.NewRedlock(nodes, dlock.WithTTL(time.Second), dlock.WithNodeTimeout(990*time.Millisecond))
			return err
		},
		"node timeout negative": func() error { _, err := dlock.NewRedlock(nodes, dlock.WithNodeTimeout(-1)); return err },
		"drift leaves nothing": func() error {
			_, err := dlock.NewRedlock(nodes, dlock.WithTTL(10*time.Millisecond), dlock.WithDriftFactor(0.9))
			return err
		},
		"retry delay inverted": func() error {
			_, err := dlock.NewRedlock(nodes, dlock.WithRetryDelay(time.Second, time.Millisecond))
			return err
		},
		"wait strategy": func() error {
			_, err := dlock.NewRedlock(nodes, dlock.WithWaitStrategy(dlock.SpinWait(time.Millisecond, time.Second)))
			return err
		},
		"wait strategy NotifyWait": func() error {
			_, err := dlock.NewRedlock(nodes, dlock.WithWaitStrategy(dlock.NotifyWait()))
			return err
		},
		"waiter lease": func() error { _, err := dlock.NewRedlock(nodes, dlock.WithWaiterLease(time.Second)); return err },
	}
	for name, f := range cases {
		if err := f(); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", name, err)
		}
	}
	// Valid edge values.
	for name, opts := range map[string][]dlock.Option{
		"drift zero":         {dlock.WithDriftFactor(0)},
		"default retry (0s)": {dlock.WithRetryDelay(0, 0)},
		"one node":           nil,
	} {
		ns := nodes
		if name == "one node" {
			ns = nodes[:1]
		}
		r, err := dlock.NewRedlock(ns, opts...)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		_ = r.Close()
	}
}

func TestRedlockOptionsRejectedElsewhere(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	for name, opt := range map[string]dlock.Option{
		"WithNodeTimeout": dlock.WithNodeTimeout(time.Second),
		"WithDriftFactor": dlock.WithDriftFactor(0.1),
		"WithRetryDelay":  dlock.WithRetryDelay(time.Millisecond, time.Second),
	} {
		if _, err := dlock.New(srv.Client(t), opt); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("New(%s): got %v, want ErrInvalidArgument", name, err)
		}
		c := newClient(t, srv)
		if _, err := c.Mutex(t.Name(), opt).TryLock(testCtx(t)); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("Client.Mutex(%s): got %v, want ErrInvalidArgument", name, err)
		}
	}

	// And the queue's options on a Redlock's lock.
	servers := redistest.StartNodes(t, 3)
	r := newRedlock(t, addrsOf(servers))
	for name, opt := range map[string]dlock.Option{
		"WithWaitStrategy": dlock.WithWaitStrategy(dlock.SpinWait(time.Millisecond, time.Second)),
		"NotifyWait":       dlock.WithWaitStrategy(dlock.NotifyWait()),
		"WithWaiterLease":  dlock.WithWaiterLease(time.Second),
		"WithNodeTimeout":  dlock.WithNodeTimeout(time.Minute), // ≥ TTL
	} {
		if _, err := r.Mutex(t.Name(), opt).Lock(testCtx(t)); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("Redlock.Mutex(%s): got %v, want ErrInvalidArgument", name, err)
		}
	}
	// A shorter per-lock TTL makes the default node timeout follow (the
	// Redlock's 300ms would leave no validity): accepted, not rejected. On a
	// loaded machine 10ms may be too short for a quorum, hence ErrQuorum is
	// tolerated.
	lease, err := r.Mutex(t.Name(), dlock.WithTTL(50*time.Millisecond)).TryLock(testCtx(t))
	switch {
	case err == nil:
		_ = lease.Unlock(testCtx(t))
	case !errors.Is(err, dlock.ErrQuorum):
		t.Errorf("TryLock with a 50ms TTL: %v", err)
	}
}
