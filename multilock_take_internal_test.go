package dlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// afterMultiAcquire is a go-redis hook that calls f once, after the first
// multi_acquire.lua call that returned without an error.
type afterMultiAcquire struct {
	f    func()
	done bool
}

func (h *afterMultiAcquire) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *afterMultiAcquire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.after(cmd, err)
		return err
	}
}

func (h *afterMultiAcquire) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.after(cmd, cmd.Err())
		}
		return err
	}
}

func (h *afterMultiAcquire) after(cmd redis.Cmder, err error) {
	args := cmd.Args()
	if h.done || err != nil || len(args) < 2 || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
		return
	}
	if a := fmt.Sprint(args[1]); a == scripts.MultiAcquire.Hash() || a == scripts.MultiAcquire.Source() {
		h.done = true
		h.f()
	}
}

// A take whose leases cannot all start (here the Watchdog closes between
// the script's reply and the leases, so the first lease's Track fails)
// leaves none of the locks the script took: not the one whose start
// failed, nor those after it in the same slot group.
func TestMultiLockTakeThatCannotStartLeavesNoLockHeld(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := redis.NewClient(srv.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// One call, from this test's goroutine: the hook needs no lock.
	rdb.AddHook(&afterMultiAcquire{f: c.wd.Close})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := t.Name() + ":" + NewOwnerID()[:8] + ":"
	names := []string{p + "a", p + "b", p + "c"}
	l, err := c.MultiLock(names...).TryLock(ctx)
	if l != nil || !errors.Is(err, ErrClosed) {
		t.Fatalf("TryLock with the Watchdog closed after the take = lease %v, error %v; want no lease and ErrClosed", l != nil, err)
	}
	for _, name := range names {
		if n := srv.Client(t).Exists(ctx, newLockKeys("dlock:", name).lock).Val(); n != 0 {
			t.Errorf("lock %q still held after the failed take", name)
		}
	}
}
