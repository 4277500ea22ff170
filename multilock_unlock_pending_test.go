package dlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// holdExtends is a go-redis hook that, once armed, holds back the renewals
// (owned_extend) of the keys it matches, alone or in a pipeline, until
// release is closed; entered is closed when the first is held.
type holdExtends struct {
	match   func(key string) bool
	armed   chan struct{}
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *holdExtends) hold(cmds ...redis.Cmder) {
	select {
	case <-h.armed:
	default:
		return
	}
	for _, cmd := range cmds {
		if isScriptCall(cmd, scripts.OwnedExtend) && h.match(scriptKey(cmd)) {
			h.once.Do(func() { close(h.entered) })
			<-h.release
			return
		}
	}
}

func (h *holdExtends) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdExtends) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.hold(cmd)
		return next(ctx, cmd)
	}
}

func (h *holdExtends) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.hold(cmds...)
		return next(ctx, cmds)
	}
}

// TestMultiLockUnlockBehindAPendingRenewalRenewsNothing: a MultiLock's
// Unlock whose locks' renewal in flight does not return within the release
// timeout sends no release for them, fails, and ends the lease lost; the
// locks must then expire within their TTL (or be released by Unlock called
// again), as the lost lease says. Before, each lock's own lease went back
// to the watchdog, which renewed it once the renewal returned, for as long
// as the Client lived: the lease was lost, and nothing would ever free its
// locks unless Unlock was retried.
func TestMultiLockUnlockBehindAPendingRenewalRenewsNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := redis.NewClient(srv.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	name := t.Name()
	a, b := name+":a", name+":b"
	h := &holdExtends{
		match:   func(k string) bool { return k == lockKey(a) || k == lockKey(b) },
		armed:   make(chan struct{}),
		entered: make(chan struct{}),
		release: make(chan struct{}),
	}
	rdb.AddHook(h)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := testCtx(t)
	const ttl = 600 * time.Millisecond
	l, err := c.MultiLock(a, b).With(dlock.WithTTL(ttl), dlock.WithReleaseTimeout(100*time.Millisecond)).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	close(h.armed)
	select {
	case <-h.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal in 5s")
	}
	uerr := l.Unlock(ctx)
	close(h.release)
	if uerr == nil {
		t.Fatal("Unlock behind a renewal held back: nil error")
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("after the failed Unlock (%v), Err = %v, want ErrLockLost", uerr, err)
	}
	check := srv.Client(t)
	deadline := time.Now().Add(4 * ttl)
	for check.Exists(ctx, lockKey(a), lockKey(b)).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Unlock failed (%v) and the lease is lost (%v), but its locks are still held %v later: renewed by nobody's lease",
				uerr, l.Err(), 4*ttl)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := l.Unlock(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock again: %v", err)
	}
}
