package dlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// An RWMutex's writers of one Client wait in the Client's local line, as
// a Mutex's waiters do (mutex_wait_test.go); its readers keep a place each.

func rwHolders(name string) string { return "dlock:{" + name + "}:rw" }

// rwGrant is one lease granted to a waiting writer or reader.
type rwGrant struct {
	label string
	token int64
}

// lockRWThen takes rw for writing (or reading, with read) in a goroutine,
// reports the grant on grants and unlocks.
func lockRWThen(ctx context.Context, t *testing.T, wg *sync.WaitGroup, rw *dlock.RWMutex, read bool, label string, grants chan<- rwGrant) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		lock := rw.Lock
		if read {
			lock = rw.RLock
		}
		l, err := lock(ctx)
		if err != nil {
			t.Errorf("%s: %v", label, err)
			return
		}
		grants <- rwGrant{label, l.Token()}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("%s: Unlock: %v", label, err)
		}
	}()
}

// rwKeysLeft counts the lock's keys still there.
func rwKeysLeft(ctx context.Context, t testing.TB, srv *redistest.Server, name string) int64 {
	k := rwHolders(name)
	return srv.Client(t).Exists(ctx, k, k+":q", k+":w", k+":tok").Val()
}

// Writers of one Client waiting while another Client holds the lock share
// one place in its queue: the first through Redis (one grant published),
// the others by local hand-offs in its turn, in arrival order and each
// with a fresh fencing token.
func TestRWWritersHandOverLocally(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	x, c := newClient(t, srv), newClient(t, srv)
	dlock.SetStandbyGrace(c, time.Minute)
	held, err := x.RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sub := srv.Client(t).Subscribe(ctx, rwHolders(name))
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	rw := c.RWMutex(name)
	labels := []string{"A", "B", "C", "D"}
	grants := make(chan rwGrant, len(labels))
	var wg sync.WaitGroup
	for i, label := range labels {
		lockRWThen(ctx, t, &wg, rw, false, label, grants)
		waitFor(t, 10*time.Second, func() bool { return dlock.LineWaiters(c, rwHolders(name)) == i+1 }, "the writer to line up")
	}
	if n := srv.Client(t).ZCard(ctx, rwHolders(name)+":q").Val(); n != 1 {
		t.Errorf("%d places queued in Redis for %d waiting writers of one Client, want 1", n, len(labels))
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(grants)
	last, next := held.Token(), 0
	for g := range grants {
		if g.label != labels[next] {
			t.Errorf("grant %d went to %s, want %s (arrival order)", next+1, g.label, labels[next])
		}
		if g.token <= last {
			t.Errorf("token %d after %d", g.token, last)
		}
		last, next = g.token, next+1
	}
	if published := messagesLeft(ctx, sub); published != 1 {
		t.Errorf("%d grants published for %d hand-offs, want 1 (the rest handed over locally)", published, len(labels))
	}
	if n := rwKeysLeft(ctx, t, srv, name); n != 0 {
		t.Errorf("%d keys left after every writer unlocked", n)
	}
}

// A reader queued in Redis behind a Client's first writer is served after
// that Client's turn, which the bound on local hand-offs ends: however
// many writers of the Client wait, the reader waits for at most
// MaxLocalHandoffs+1 of them.
func TestRWReaderWaitsAtMostOneTurnOfWriters(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	name := t.Name()
	ctx := testCtx(t)
	x, y, c := newClient(t, srv), newClient(t, srv), newClient(t, srv)
	dlock.SetStandbyGrace(c, time.Minute)
	held, err := x.RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rw := c.RWMutex(name)
	const writers = dlock.MaxLocalHandoffs + 4
	grants := make(chan rwGrant, writers+1)
	var wg sync.WaitGroup
	lockRWThen(ctx, t, &wg, rw, false, "W", grants)
	waitFor(t, 10*time.Second, func() bool { return srv.Client(t).ZCard(ctx, rwHolders(name)+":q").Val() == 1 }, "the first writer to queue")
	lockRWThen(ctx, t, &wg, y.RWMutex(name), true, "R", grants)
	waitFor(t, 10*time.Second, func() bool { return srv.Client(t).ZCard(ctx, rwHolders(name)+":q").Val() == 2 }, "the reader to queue")
	for i := 1; i < writers; i++ {
		lockRWThen(ctx, t, &wg, rw, false, "W", grants)
	}
	waitFor(t, 10*time.Second, func() bool { return dlock.LineWaiters(c, rwHolders(name)) == writers }, "every writer to line up")
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(grants)
	before, last := 0, held.Token()
	for g := range grants {
		if g.token <= last {
			t.Errorf("token %d after %d", g.token, last)
		}
		last = g.token
		if g.label == "R" {
			break
		}
		before++
	}
	if before > dlock.MaxLocalHandoffs+1 {
		t.Errorf("the reader was served after %d writers of one Client, want at most %d", before, dlock.MaxLocalHandoffs+1)
	}
	if n := rwKeysLeft(ctx, t, srv, name); n != 0 {
		t.Errorf("%d keys left after every holder unlocked", n)
	}
}
