package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/scripts"
)

// An acquire whose caller gave up at its deadline while the request was
// still on its way reaches Redis later and takes the lock (or, for a
// semaphore, the permit). Its clean-up must not overtake it: sent at once,
// it found nothing to release, and the late grant held the lock for an
// owner nobody knew until its TTL (a minute here). Now the clean-up waits
// for the request, then releases what it took.
func TestAbandonedAcquireIsCleanedUpAfterItLands(t *testing.T) {
	cases := []struct {
		name    string
		script  *driver.Script // the acquire's
		release *driver.Script
		acquire func(ctx context.Context, c *dlock.Client, name string) error
		free    func(ctx context.Context, c *dlock.Client, name string) bool
	}{
		{"Mutex.TryLock", scripts.MutexAcquire, scripts.MutexRelease,
			func(ctx context.Context, c *dlock.Client, name string) error {
				_, err := c.Mutex(name).TryLock(ctx)
				return err
			}, mutexFree},
		{"Mutex.Lock", scripts.MutexAcquire, scripts.MutexRelease,
			func(ctx context.Context, c *dlock.Client, name string) error {
				_, err := c.Mutex(name).Lock(ctx)
				return err
			}, mutexFree},
		{"FairMutex.Lock", scripts.MutexAcquire, scripts.MutexRelease,
			func(ctx context.Context, c *dlock.Client, name string) error {
				_, err := c.FairMutex(name).Lock(ctx)
				return err
			}, mutexFree},
		{"Semaphore.TryAcquire", scripts.SemAcquire, scripts.SemRelease,
			func(ctx context.Context, c *dlock.Client, name string) error {
				_, err := c.Semaphore(name, 1).TryAcquire(ctx, 1)
				return err
			},
			func(ctx context.Context, c *dlock.Client, name string) bool {
				p, err := c.Semaphore(name, 1).TryAcquire(ctx, 1)
				if err != nil {
					return false
				}
				_ = p.Release(ctx)
				return true
			}},
	}
	srv := redistest.Shared(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			// The acquire is delayed on its way to the server: go-redis
			// has written it and waits for the reply.
			hold := &writeHold{hash: tc.script.Hash(), started: make(chan struct{}, 1), resume: make(chan struct{}), replied: make(chan struct{})}
			release := newScriptHold(tc.release, true) // answered; never held
			close(release.resume)
			// go-redis as configured by default: it does not end a call at
			// its context's deadline, so the driver leaves the call on its
			// way and says so.
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: hold.dial})
			t.Cleanup(func() { _ = rdb.Close() })
			rdb.AddHook(release)
			c, err := dlock.New(rdb, dlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			other := newClient(t, srv)
			name := uniqueName(t)
			// Load the scripts: a hook that holds an EVALSHA answered
			// NOSCRIPT would hold it before the script ran.
			if !tc.free(ctx, c, name+"warm") {
				t.Fatal("warm-up acquire refused")
			}

			hold.armed.Store(true)
			actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			err = tc.acquire(actx, c, name)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("acquire held before the wire, 200 ms deadline: %v; want its deadline", err)
			}
			<-hold.started
			// The fixed code sends no release while the acquire is on its
			// way; the old one sent it at once, and it was answered first.
			release.armed.Store(true)
			select {
			case <-release.started:
			case <-time.After(300 * time.Millisecond):
			}
			close(hold.resume) // the acquire goes out, late, and takes the lock
			<-hold.replied
			waitFor(t, 10*time.Second, func() bool { return tc.free(ctx, other, name) },
				"free "+tc.name+" after the abandoned acquire landed (it is kept for the 1 min TTL when the clean-up went first)")
		})
	}
}

func mutexFree(ctx context.Context, c *dlock.Client, name string) bool {
	l, err := c.Mutex(name).TryLock(ctx)
	if err != nil {
		return false
	}
	_ = l.Unlock(ctx)
	return true
}

// writeHold is a go-redis Dialer whose connections, once armed, delay the
// first write that carries the script hash until resume closes; started
// receives when it holds it.
type writeHold struct {
	hash    string
	armed   atomic.Bool
	once    sync.Once
	started chan struct{}
	resume  chan struct{}
	replied chan struct{} // closed when the delayed write's reply is read
}

func (h *writeHold) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &heldWriteConn{Conn: conn, h: h}, nil
}

type heldWriteConn struct {
	net.Conn
	h    *writeHold
	late atomic.Bool // the delayed write went out on this connection
	told sync.Once
}

func (c *heldWriteConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.late.Load() {
		c.told.Do(func() { close(c.h.replied) })
	}
	return n, err
}

// Write passes b on, unless it is the first write with the hash: that one
// is reported written at once and reaches the server only when resume
// closes, as a packet the network delays.
func (c *heldWriteConn) Write(b []byte) (int, error) {
	held := false
	if c.h.armed.Load() && bytes.Contains(b, []byte(c.h.hash)) {
		c.h.once.Do(func() { held = true })
	}
	if !held {
		return c.Conn.Write(b)
	}
	c.h.started <- struct{}{}
	late := append([]byte(nil), b...)
	go func() {
		<-c.h.resume
		c.late.Store(true)
		_, _ = c.Conn.Write(late)
	}()
	return len(b), nil
}

// The same when the acquire left on its way was a Mutex head's, whose place
// passed to the next goroutine of its Client: that goroutine's clean-up,
// when its own wait ends, must wait for the head's attempt too.
func TestHandedOverPlaceIsCleanedUpAfterTheHeadsAttemptLands(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	hold := &writeHold{hash: scripts.MutexAcquire.Hash(), started: make(chan struct{}, 1), resume: make(chan struct{}), replied: make(chan struct{})}
	release := newScriptHold(scripts.MutexRelease, true) // answered; never held
	close(release.resume)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: hold.dial})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(release)
	// A short waiter lease: the head polls every 50 ms.
	c, err := dlock.New(rdb, dlock.WithTTL(time.Minute), dlock.WithWaiterLease(150*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	other := newClient(t, srv)
	name := uniqueName(t)
	if !mutexFree(ctx, c, name+"warm") {
		t.Fatal("warm-up acquire refused")
	}
	held := mustLock(t, other, name)

	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	headErr, nextErr := make(chan error, 1), make(chan error, 1)
	go func() { _, err := c.Mutex(name).Lock(hctx); headErr <- err }()
	waitFor(t, 10*time.Second, func() bool { return srv.Client(t).ZCard(ctx, lockKey(name)+":q").Val() == 1 }, "the head queued")
	go func() { _, err := c.Mutex(name).Lock(wctx); nextErr <- err }()
	waitFor(t, 10*time.Second, func() bool { return dlock.LocalWaiters(c, name) == 2 }, "a goroutine behind the head")
	hold.armed.Store(true)
	<-hold.started // the head's next poll, on its way
	hcancel()
	if err := <-headErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("the head's Lock: %v", err)
	}
	waitFor(t, 10*time.Second, func() bool { return dlock.LocalWaiters(c, name) == 1 }, "the next goroutine waiting as the head")
	release.armed.Store(true)
	wcancel() // its clean-up must wait for the head's attempt
	if err := <-nextErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("the next goroutine's Lock: %v", err)
	}
	select {
	case <-release.started:
	case <-time.After(300 * time.Millisecond):
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	close(hold.resume) // the head's attempt lands on the free lock and takes it
	<-hold.replied
	waitFor(t, 10*time.Second, func() bool { return mutexFree(ctx, other, name) },
		"the lock free after the head's late attempt landed (kept for the 1 min TTL when the clean-up went first)")
}
