package wait

import (
	"context"
	"errors"
	"testing"
	"time"
)

type testLine = Line[string, int, string]

func always(int) bool { return true }

// turnOf starts a queue for key with a head, and a waiter behind it that
// stands by once the head holds the lock (Promote with turn).
func turnOf(t *testing.T, ln *testLine, key string) (*Queue[string, int, string], *Waiter[int, string]) {
	t.Helper()
	q, head, joined, closed := ln.Start(key, 0)
	if joined || closed {
		t.Fatalf("Start: joined %v, closed %v; want a new queue", joined, closed)
	}
	q2, w := ln.Join(key, 1)
	if q2 != q {
		t.Fatal("Join did not join the queue")
	}
	if taken := ln.Promote(q, head, true); taken {
		t.Fatal("Promote reported a hand-off on its way")
	}
	return q, w
}

func TestLineHandsOffToTheWaiterStandingBy(t *testing.T) {
	var ln testLine
	_, w := turnOf(t, &ln, "k")
	got, streak := ln.Successor("k", 0, always)
	if got != w || streak != 1 {
		t.Fatalf("Successor: %v, %d; want the waiter standing by, 1", got, streak)
	}
	grant := "lock"
	got.Give(Turn[string]{Owner: "o", Grant: &grant})
	if tn := <-w.Outcome(); tn.Grant == nil || *tn.Grant != "lock" {
		t.Errorf("the waiter was told %+v; want the grant", tn)
	}
}

func TestLineBoundsHandoffsInARow(t *testing.T) {
	var ln testLine
	q, _ := turnOf(t, &ln, "k")
	for i := 1; i <= MaxLocalHandoffs; i++ {
		w := newWaiter[int, string](i)
		ln.mu.Lock()
		q.join(w)
		ln.mu.Unlock()
		if got, streak := ln.Successor("k", 0, always); got == nil || streak != i {
			t.Fatalf("hand-off %d: got %v, streak %d", i, got, streak)
		}
	}
	if got, _ := ln.Successor("k", 0, always); got != nil {
		t.Fatalf("hand-off %d in a row was allowed; want the Unlock through Redis", MaxLocalHandoffs+1)
	}
	// A streak carried on the lease counts too (Redlock).
	var ln2 testLine
	turnOf(t, &ln2, "k")
	if got, _ := ln2.Successor("k", MaxLocalHandoffs, always); got != nil {
		t.Fatal("a lease that was the last of a full streak handed over again")
	}
}

func TestLineHandsToAContendingHeadOnlyWhenAllowed(t *testing.T) {
	for _, toHead := range []bool{false, true} {
		ln := testLine{HandToHead: toHead}
		_, head, _, _ := ln.Start("k", 0)
		got, _ := ln.Successor("k", 0, always)
		if (got == head) != toHead || (got == nil) == toHead {
			t.Fatalf("HandToHead %v: Successor returned %v; head %v", toHead, got, head)
		}
		if toHead {
			if !ln.Taken(head) {
				t.Fatal("the head handed the lock is not marked taken")
			}
			if again, _ := ln.Successor("k", 0, always); again != nil {
				t.Fatal("a second Unlock handed the lock to a head already taken")
			}
		}
	}
}

func TestLineWaiterStandingByBecomesTheHead(t *testing.T) {
	var ln testLine
	q, w := turnOf(t, &ln, "k")
	_, how, err := ln.Await(context.Background(), q, w, time.Millisecond, nil, nil)
	if how != Head || err != nil {
		t.Fatalf("Await: %v, %v; want Head after the grace", how, err)
	}
	// It contends now: an Unlock goes through Redis.
	if got, _ := ln.Successor("k", 0, always); got != nil {
		t.Fatal("an Unlock handed the lock past a head contending in Redis")
	}
}

func TestLineWaiterLeavingReportsTheHeadsFailure(t *testing.T) {
	var ln testLine
	q, _, _, _ := ln.Start("k", 0)
	_, w := ln.Join("k", 1)
	failure := errors.New("no answer")
	ln.NoteErr(q, failure)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, how, err := ln.Await(ctx, q, w, 0, nil, nil)
	if how != Left || !errors.Is(err, failure) {
		t.Fatalf("Await: %v, %v; want Left with the head's failure", how, err)
	}
	if _, n, _ := ln.Count(func(string) bool { return true }); n != 1 {
		t.Errorf("%d waiters left; want the head alone", n)
	}
}

func TestLineHeadLeavingPassesItsPlace(t *testing.T) {
	var ln testLine
	q, head, _, _ := ln.Start("k", 0)
	_, w := ln.Join("k", 1)
	st := &Owner{}
	if nobody, _ := ln.Leave(q, head, "place", st); nobody {
		t.Fatal("Leave found nobody to take the place")
	}
	tn, how, _ := ln.Await(context.Background(), q, w, 0, nil, nil)
	if how != Woken || tn.Owner != "place" || tn.State != st {
		t.Fatalf("the next waiter was told %+v (%v); want the head's place", tn, how)
	}
	if nobody, _ := ln.Leave(q, w, "place", st); !nobody {
		t.Fatal("the last head leaving found someone to take its place")
	}
	if n, _, _ := ln.Count(func(string) bool { return true }); n != 0 {
		t.Errorf("%d queues left; want none", n)
	}
}
