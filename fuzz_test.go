package dlock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/chaos"
	"github.com/dlock-go/dlock/internal/protocol"
)

// Fuzz tests of what reaches the library from outside: arguments (options,
// names, TTLs, counts) and script replies. Their seed corpora run in every
// `go test`; `go test -fuzz FuzzX` explores further. See
// docs/reliability.md, "Bad inputs".

// fuzzDriver is a driver.Driver that answers every script call with what
// reply says, and counts the calls.
type fuzzDriver struct {
	mu    sync.Mutex
	calls int
	reply any
}

func (d *fuzzDriver) set(reply any) {
	d.mu.Lock()
	d.reply = reply
	d.mu.Unlock()
}

func (d *fuzzDriver) sent() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls
}

func (d *fuzzDriver) Run(ctx context.Context, calls ...*driver.Call) {
	d.mu.Lock()
	d.calls += len(calls)
	reply := d.reply
	d.mu.Unlock()
	for _, c := range calls {
		if err, ok := reply.(error); ok {
			c.Err = err
			continue
		}
		c.Reply = reply
		c.Acked = c.Replicas
	}
}

func (d *fuzzDriver) PublishCommand() string { return "PUBLISH" }

func (d *fuzzDriver) Subscribe(driver.Handler) driver.Subscription { return fuzzSubscription{} }

type fuzzSubscription struct{}

func (fuzzSubscription) Subscribe(context.Context, ...string) error   { return nil }
func (fuzzSubscription) Unsubscribe(context.Context, ...string) error { return nil }
func (fuzzSubscription) Close() error                                 { return nil }

// grant is the reply of an acquire script that granted the lock (with the
// hold count and grant id a reentrant lock's reply adds).
var grant = []any{int64(1), int64(7), int64(1000), int64(1), "0123456789abcdef0123456789abcdef"}

// FuzzScriptReplies answers every script of every primitive with an
// arbitrary reply: nothing may panic (in the caller's goroutine or in the
// background clean-up), whatever the server, a proxy or another version of
// dlock sends back.
func FuzzScriptReplies(f *testing.F) {
	for _, r := range []any{
		nil, int64(0), int64(1), int64(-1), int64(-2), int64(-3), "x", []any{},
		grant, []any{int64(0), int64(50), int64(1)}, []any{int64(0)}, []any{int64(1)}, []any{int64(2)},
		[]any{int64(2), int64(9), int64(3000)}, []any{int64(2), int64(9), int64(3000), "next"},
		[]any{int64(1), int64(7)}, []any{"1", int64(7), int64(1000)}, []any{int64(3), int64(1), int64(1)},
		[]any{int64(1), int64(9), "W-owner", int64(9), int64(300)}, []any{int64(2), int64(1)},
		[]any{[]any{int64(1)}, nil}, []any{int64(1), nil, nil, nil},
	} {
		f.Add(chaos.ReplyBytes(r))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		reply := chaos.Reply(data)
		d := &fuzzDriver{}
		c, err := NewWithDriver(d, WithAutoRenew(false), WithTTL(time.Second), WithReleaseTimeout(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		ctx = WithOwner(ctx, "fuzz")

		// Attempts answered with the reply.
		d.set(reply)
		tryAll(ctx, c)

		// Leases granted, then every operation on them answered with the
		// reply.
		d.set(grant)
		var leases []*Lease
		if l, err := c.Mutex("m").TryLock(ctx); err == nil {
			leases = append(leases, l)
		}
		if l, err := c.RWMutex("rw").TryLock(ctx); err == nil {
			leases = append(leases, l)
		}
		if l, err := c.RWMutex("rw").TryRLock(ctx); err == nil {
			leases = append(leases, l)
		}
		if l, err := c.ReentrantMutex("re").TryLock(ctx); err == nil {
			leases = append(leases, l)
		}
		var permits *Permits
		if p, err := c.Semaphore("s", 3).TryAcquire(ctx, 1); err == nil {
			permits = p
		}
		var write *Lease
		if l, err := c.RWMutex("rw2").TryLock(ctx); err == nil {
			write = l
		}
		d.set(reply)
		for _, l := range leases {
			_ = l.Extend(ctx, time.Second)
			_, _ = l.TTL(ctx)
			_ = l.Unlock(ctx)
		}
		if permits != nil {
			_ = permits.Extend(ctx, time.Second)
			_, _ = permits.TTL(ctx)
			_ = permits.Release(ctx)
		}
		if write != nil {
			if r, err := c.RWMutex("rw2").Downgrade(ctx, write); err == nil {
				_ = r.Unlock(ctx)
			}
		}
	})
}

// tryAll makes one attempt of every operation of every primitive.
func tryAll(ctx context.Context, c *Client) {
	unlock := func(l *Lease, err error) {
		if err == nil {
			_ = l.Unlock(ctx)
		}
	}
	unlock(c.Mutex("m").TryLock(ctx))
	unlock(c.FairMutex("f").TryLock(ctx))
	unlock(c.RWMutex("rw").TryLock(ctx))
	unlock(c.RWMutex("rw").TryRLock(ctx))
	unlock(c.ReentrantMutex("re").TryLock(ctx))
	_, _ = c.ReentrantMutex("re").HoldCount(ctx)
	unlock(c.MultiLock("{t}a", "{t}b").TryLock(ctx))
	s := c.Semaphore("s", 3)
	if p, err := s.TryAcquire(ctx, 1); err == nil {
		_ = p.Release(ctx)
	}
	_, _ = s.Available(ctx)
	_ = s.SetPermits(ctx, 4)
	l := c.Latch("l")
	_, _ = l.TrySetCount(ctx, 2)
	_ = l.CountDown(ctx)
	_, _ = l.Count(ctx)
	_, _ = c.Inspect(ctx, "m")
	_, _ = c.ForceUnlock(ctx, "m")
	// A waiting Lock, until its short deadline.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	unlock(c.Mutex("m").Lock(short))
}

// FuzzRedlockReply feeds Redlock's per-node acquire parser arbitrary replies.
func FuzzRedlockReply(f *testing.F) {
	for _, r := range []any{int64(1), []any{int64(1)}, []any{int64(0), int64(20)}, []any{int64(0)}, []any{}, nil, "x"} {
		f.Add(chaos.ReplyBytes(r))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		reply := chaos.Reply(data)
		// A malformed reply may yield any holder TTL (it only shapes an
		// error message and a retry delay); it must not panic, and a grant
		// carries none.
		if ok, held, err := protocol.RedlockAcquireReply(reply); err == nil && ok && held != (protocol.RedlockHeld{}) {
			t.Fatalf("RedlockAcquireReply(%#v): granted with %+v", reply, held)
		}
		_, _ = protocol.Ints(reply, 3)
	})
}

// FuzzArguments builds locks of every kind from arbitrary names, options
// and counts: each call either succeeds or fails with ErrInvalidArgument
// having sent nothing, and nothing panics.
func FuzzArguments(f *testing.F) {
	f.Add("orders:1", int64(30000), int64(3000), int64(0), "dlock:", "host=h", int64(0), int64(0), int64(5000), 3, int64(2))
	f.Add("", int64(0), int64(0), int64(0), "", "", int64(0), int64(0), int64(0), 0, int64(0))
	f.Add("}x", int64(5), int64(50), int64(-1), "a{b", strings.Repeat("i", 300), int64(1), int64(0), int64(-1), -1, int64(-1))
	f.Add("{t}x", int64(10), int64(100), int64(10), "p:", "", int64(1), int64(60000), int64(1), 1, int64(1))
	f.Add(strings.Repeat("n", MaxNameLen+1), int64(1<<62), int64(60001), int64(1<<62), "}", "x", int64(-5), int64(-7), int64(1<<62), 1<<30, int64(1<<62))
	f.Fuzz(func(t *testing.T, name string, ttlMS, leaseMS, maxHoldMS int64, prefix, info string, spinMin, spinMax, releaseMS int64, permits int, count int64) {
		ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
		opts := []Option{
			WithTTL(ms(ttlMS)), WithWaiterLease(ms(leaseMS)), WithMaxHold(ms(maxHoldMS)), WithKeyPrefix(prefix),
			WithOwnerInfo(info), WithReleaseTimeout(ms(releaseMS)),
		}
		if spinMin != 0 || spinMax != 0 {
			opts = append(opts, WithWaitStrategy(SpinWait(ms(spinMin), ms(spinMax))))
		}
		d := &fuzzDriver{reply: grant}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ctx = WithOwner(ctx, "fuzz")
		check := func(op string, err error, before int, allowed ...error) {
			t.Helper()
			for _, a := range allowed {
				if errors.Is(err, a) {
					err = nil
				}
			}
			switch {
			case err == nil:
			case errors.Is(err, ErrInvalidArgument):
				if n := d.sent() - before; n != 0 {
					t.Fatalf("%s: ErrInvalidArgument after sending %d calls: %v", op, n, err)
				}
			default:
				t.Fatalf("%s: %v, want success or ErrInvalidArgument", op, err)
			}
		}
		c, err := NewWithDriver(d, opts...)
		check("New", err, 0)
		if err != nil {
			c, err = NewWithDriver(d)
			if err != nil {
				t.Fatal(err)
			}
		}
		defer c.Close()

		before := d.sent()
		l, err := c.Mutex(name, opts...).TryLock(ctx)
		check("Mutex.TryLock", err, before)
		if err == nil {
			d.set(int64(1)) // owned_extend: renewed
			before = d.sent()
			// ErrNotHeld: the hold limit (WithMaxHold) is reached.
			check("Lease.Extend", l.Extend(ctx, ms(ttlMS)), before, ErrNotHeld)
			d.set(grant)
			_ = l.Unlock(ctx)
		}
		before = d.sent()
		l, err = c.RWMutex(name, opts...).TryRLock(ctx)
		check("RWMutex.TryRLock", err, before)
		if err == nil {
			_ = l.Unlock(ctx)
		}
		before = d.sent()
		l, err = c.ReentrantMutex(name, opts...).TryLock(ctx)
		check("ReentrantMutex.TryLock", err, before)
		if err == nil {
			_ = l.Unlock(ctx)
		}
		before = d.sent()
		l, err = c.MultiLock(name, name+"2").TryLock(ctx)
		check("MultiLock.TryLock", err, before)
		if err == nil {
			_ = l.Unlock(ctx)
		}
		before = d.sent()
		p, err := c.Semaphore(name, permits, opts...).TryAcquire(ctx, int(count))
		check("Semaphore.TryAcquire", err, before)
		if err == nil {
			_ = p.Release(ctx)
		}
		d.set(int64(1))
		before = d.sent()
		_, err = c.Latch(name, opts...).TrySetCount(ctx, count)
		check("Latch.TrySetCount", err, before)
	})
}
