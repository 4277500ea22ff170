package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestRedlockLongestWaitingLineIsNext checks the order redlock_acquire keeps
// among the processes' lines waiting for a held lock: each node names the
// line that has waited longest, whichever asked first; a line that takes the
// lock leaves the order; a TryLock joins none.
func TestRedlockLongestWaitingLineIsNext(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	ctx := context.Background()
	holder := newInternalRedlock(t, addrs)
	name := t.Name()
	held, err := holder.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Two processes' lines: a has waited longer than b, but b asks first.
	a, b := newInternalRedlock(t, addrs), newInternalRedlock(t, addrs)
	ma, mb := a.Mutex(name), b.Mutex(name)
	ea, eb := a.hear(ma), b.hear(mb)
	defer a.unhear(ea)
	defer b.unhear(eb)
	now := time.Since(redlockEpoch)
	ea.since.Store(int64(now - 2*time.Second))
	eb.since.Store(int64(now - time.Second))
	// A line's first attempt lists nothing: an uncontended Lock costs what
	// a TryLock does.
	for _, l := range []struct {
		m *RedlockMutex
		e *redlockEar
	}{{mb, eb}, {ma, ea}} {
		if res := lineAttempt(t, l.m, l.e); res.hold != nil || !errors.Is(res.err, ErrNotObtained) || res.next {
			t.Fatalf("first attempt: granted %v, err %v, next %v; want held by another, not next", res.hold != nil, res.err, res.next)
		}
	}
	for _, s := range servers {
		if n := s.Do(t, "EXISTS", ma.linesKey); n != int64(0) {
			t.Errorf("%s: a first attempt listed its line", s.Addr())
		}
	}
	if res := lineAttempt(t, mb, eb); res.hold != nil || !errors.Is(res.err, ErrNotObtained) || !res.next {
		t.Fatalf("b alone: granted %v, err %v, next %v; want held by another, b next", res.hold != nil, res.err, res.next)
	}
	if res := lineAttempt(t, ma, ea); res.hold != nil || !res.next {
		t.Fatalf("a, longer waiting: granted %v, next %v; want held, a next", res.hold != nil, res.next)
	}
	if res := lineAttempt(t, mb, eb); res.hold != nil || res.next {
		t.Fatalf("b again: granted %v, next %v; want held, a next", res.hold != nil, res.next)
	}
	if _, err := holder.Mutex(name).TryLock(ctx); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("a TryLock while held: %v", err)
	}
	checkLinesListed(t, servers, ma)

	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if res := lineAttempt(t, ma, ea); res.hold == nil {
		t.Fatalf("a after the release: %v", res.err)
	}
	if res := lineAttempt(t, mb, eb); res.hold != nil || !res.next {
		t.Fatalf("b once a holds: granted %v, next %v; want held, b next", res.hold != nil, res.next)
	}
	// The quorum that granted a dropped its line (a listed it on a quorum).
	gone := 0
	for _, s := range servers {
		if s.Do(t, "HEXISTS", ma.linesKey, a.lineID) == int64(0) {
			gone++
		}
	}
	if gone < quorum(len(servers)) {
		t.Errorf("a's line is still listed on %d of %d nodes after a took the lock", len(servers)-gone, len(servers))
	}
}

// lineAttempt makes one attempt of m's Lock with a fresh owner, heard by
// e's line; a grant's lease is unlocked when the test ends.
func lineAttempt(t *testing.T, m *RedlockMutex, e *redlockEar) acquireResult {
	t.Helper()
	ctx := context.Background()
	owner, err := ownerid.New("")
	if err != nil {
		t.Fatal(err)
	}
	res := m.attempt(ctx, "Lock", owner, e)
	if res.hold != nil {
		l, err := m.lease(ctx, owner, res)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Unlock(context.Background()) })
	}
	return res
}

// checkLinesListed checks the lines m's lock lists on each node: at most
// two, expiring within half the TTL, on a quorum of nodes at least. An
// attempt returns once a quorum of nodes has answered, and those listed
// its line; a node whose request came late, or not at all on a loaded
// machine, may list less.
func checkLinesListed(t *testing.T, servers []*redistest.Server, m *RedlockMutex) {
	t.Helper()
	listed := 0
	for _, s := range servers {
		n, _ := s.Do(t, "HLEN", m.linesKey).(int64)
		if n > 2 {
			t.Errorf("%s: %v lines, want at most a's and b's (a TryLock joins none)", s.Addr(), n)
		}
		if n == 0 {
			continue
		}
		listed++
		if pttl, _ := s.Do(t, "PTTL", m.linesKey).(int64); pttl <= 0 || time.Duration(pttl)*time.Millisecond > redlockPX(&m.cfg)/2+time.Millisecond {
			t.Errorf("%s: the lines expire in %vms, want within half the TTL", s.Addr(), pttl)
		}
	}
	if listed < quorum(len(servers)) {
		t.Errorf("lines listed on %d nodes, want a quorum", listed)
	}
}
