package bench

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestTargets checks every adapter once: a lock excludes a second client's
// TryLock, a third client's bounded Lock, and a TryLock through its own
// client (the goroutines that share a client in scenario 2 are owners of
// their own), and is free again after Unlock.
func TestTargets(t *testing.T) {
	srv := redistest.Start(t)
	nodes := redistest.StartNodes(t, 3)
	nodeAddrs := []string{nodes[0].Addr(), nodes[1].Addr(), nodes[2].Addr()}
	for _, tg := range Targets() {
		var setups [][]string
		if tg.Single {
			setups = append(setups, []string{srv.Addr()})
		}
		if tg.Multi {
			setups = append(setups, nodeAddrs)
		}
		for _, addrs := range setups {
			t.Run(tg.Name+"/nodes="+strconv.Itoa(len(addrs)), func(t *testing.T) {
				if tg.Shares {
					checkSharing(t, tg, addrs)
					return
				}
				checkExclusion(t, tg, addrs)
			})
		}
	}
}

// lockWithTwo makes two clients of tg, closed when t ends, and takes key
// with the first, whose commands must show on its counter.
func lockWithTwo(ctx context.Context, t *testing.T, tg Target, addrs []string, key string) (a, b Locker, unlock Unlock) {
	t.Helper()
	var cnt Counter
	a, err := tg.New(Config{Addrs: addrs, Counter: &cnt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	b, err = tg.New(Config{Addrs: addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	unlock, err = a.Lock(ctx, key)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if cnt.Snapshot().Commands == 0 {
		t.Errorf("the counter saw no command")
	}
	return a, b, unlock
}

func checkExclusion(t *testing.T, tg Target, addrs []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := "bench:test:" + tg.Name
	a, b, unlock := lockWithTwo(ctx, t, tg, addrs, key)
	if _, err := b.TryLock(ctx, key); !errors.Is(err, ErrBusy) {
		t.Errorf("TryLock on a held key: got %v, want ErrBusy", err)
	}
	if _, err := a.TryLock(ctx, key); !errors.Is(err, ErrBusy) {
		t.Errorf("TryLock on a key held through the same client: got %v, want ErrBusy", err)
	}
	// The bounded Lock gives up on its own client, closed before Unlock: a
	// waiter that gives up leaves its place in a queue in the background
	// (dlock's Lock returns at its deadline), and an Unlock before that
	// lands hands the lock to it until the clean-up passes it on. Close
	// waits for the clean-up, so b's TryLock below finds the lock free.
	quitter, err := tg.New(Config{Addrs: addrs})
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 150*time.Millisecond)
	_, err = quitter.Lock(short, key)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock on a held key with a 150ms deadline: got %v, want a DeadlineExceeded", err)
	}
	if err := quitter.Close(); err != nil {
		t.Errorf("Close after a Lock that gave up: %v", err)
	}
	if err := unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	unlock, err = b.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock after Unlock: %v", err)
	}
	if err := unlock(ctx); err != nil {
		t.Fatalf("second Unlock: %v", err)
	}
}

// checkSharing is checkExclusion for a target that does not exclude
// (Target.Shares): a second client takes the key beside the first, and
// both give it back.
func checkSharing(t *testing.T, tg Target, addrs []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := "bench:test:" + tg.Name
	_, b, unlockA := lockWithTwo(ctx, t, tg, addrs, key)
	unlockB, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock beside a holder: %v", err)
	}
	if err := unlockA(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := unlockB(ctx); err != nil {
		t.Fatalf("second Unlock: %v", err)
	}
}
