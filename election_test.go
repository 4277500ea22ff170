package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// campaign starts a Campaign of e for value; the leadership (or error)
// comes on the channel returned.
func campaign(ctx context.Context, e *dlock.Election, value string) <-chan leadershipOrError {
	got := make(chan leadershipOrError, 1)
	go func() {
		ld, err := e.Campaign(ctx, value)
		got <- leadershipOrError{ld, err}
	}()
	return got
}

type leadershipOrError struct {
	ld  *dlock.Leadership
	err error
}

// leads waits for a campaign to win, failing the test after limit.
func leads(t *testing.T, got <-chan leadershipOrError, limit time.Duration) *dlock.Leadership {
	t.Helper()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("Campaign: %v", r.err)
		}
		return r.ld
	case <-time.After(limit):
		t.Fatalf("no leadership within %v", limit)
	}
	return nil
}

func wantLeader(ctx context.Context, t *testing.T, e *dlock.Election, ld *dlock.Leadership) {
	t.Helper()
	info, err := e.Leader(ctx)
	if err != nil {
		t.Fatalf("Leader: %v", err)
	}
	if info.Value != ld.Value() || info.Term != ld.Term() || info.Owner == "" {
		t.Fatalf("Leader: %+v; want value %q, term %d and an owner", info, ld.Value(), ld.Term())
	}
}

func TestElectionServesCampaignersInArrivalOrder(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := testCtx(t)
	name := t.Name()
	e := newClient(t, srv).Election(name)
	if _, err := e.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatalf("Leader of an election nobody campaigned in: %v; want ErrNoLeader", err)
	}
	a := leads(t, campaign(ctx, e, "a"), 10*time.Second)
	wantLeader(ctx, t, e, a)

	// b then c queue, each from a Client of its own (a process of its own).
	b := campaign(ctx, newClient(t, srv).Election(name), "b")
	waitCampaigners(t, srv, name, 1)
	c := campaign(ctx, newClient(t, srv).Election(name), "c")
	waitCampaigners(t, srv, name, 2)

	terms := []int64{a.Term()}
	prev := a
	for _, next := range []<-chan leadershipOrError{b, c} {
		if err := prev.Resign(ctx); err != nil {
			t.Fatalf("Resign: %v", err)
		}
		if err := prev.Err(); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Err after Resign: %v; want ErrNotHeld", err)
		}
		ld := leads(t, next, 10*time.Second)
		wantLeader(ctx, t, e, ld)
		terms = append(terms, ld.Term())
		prev = ld
	}
	if got := prev.Value(); got != "c" {
		t.Errorf("last leader's value %q; want c (arrival order a, b, c)", got)
	}
	for i := 1; i < len(terms); i++ {
		if terms[i] <= terms[i-1] {
			t.Errorf("terms %v do not strictly increase", terms)
		}
	}
	if err := prev.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Errorf("Leader after the last Resign: %v; want ErrNoLeader", err)
	}
}

func TestElectionProclaimOnlyWhileLeading(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := testCtx(t)
	c := newClient(t, srv)
	e := c.Election(t.Name())
	ld := leads(t, campaign(ctx, e, "v1"), 10*time.Second)
	if err := ld.Proclaim(ctx, "v2"); err != nil {
		t.Fatalf("Proclaim: %v", err)
	}
	wantLeader(ctx, t, e, ld)
	if ld.Value() != "v2" {
		t.Errorf("Value after Proclaim: %q", ld.Value())
	}
	srv.Do(t, "DEL", lockKey(t.Name())+":election") // the lock taken away
	if err := ld.Proclaim(ctx, "v3"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Proclaim after the lock was taken away: %v; want ErrNotHeld", err)
	}
	if _, err := e.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Errorf("Leader after the lock was taken away: %v; want ErrNoLeader", err)
	}
	if _, err := e.Campaign(ctx, strings.Repeat("x", dlock.MaxLeaderValueLen+1)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Campaign with a value too long: %v; want ErrInvalidArgument", err)
	}
	if err := e.Run(ctx, "v", nil); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("Run with a nil function: %v; want ErrInvalidArgument", err)
	}
}

func TestElectionObserverSeesEveryChangeInOrder(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := testCtx(t)
	name := t.Name()
	e := newClient(t, srv).Election(name)
	octx, stop := context.WithCancel(ctx)
	changes := newClient(t, srv).Election(name).Observe(octx)
	// next is the next change seen; the TTL is the default 30 s, so a
	// change within 10 s came by pub/sub, not by a poll.
	next := func(what string) dlock.LeaderInfo {
		t.Helper()
		select {
		case info, ok := <-changes:
			if !ok {
				t.Fatalf("Observe's channel closed before %s", what)
			}
			return info
		case <-time.After(10 * time.Second):
			t.Fatalf("the observer did not see %s within 10s", what)
		}
		return dlock.LeaderInfo{}
	}
	if info := next("the first state"); info != (dlock.LeaderInfo{}) {
		t.Fatalf("first state %+v; want nobody", info)
	}
	a := leads(t, campaign(ctx, e, "a"), 10*time.Second)
	if info := next("a's leadership"); info.Value != "a" || info.Term != a.Term() {
		t.Fatalf("saw %+v; want a at term %d", info, a.Term())
	}
	if err := a.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	if info := next("a's new value"); info.Value != "a2" || info.Term != a.Term() {
		t.Fatalf("saw %+v; want a2 at term %d", info, a.Term())
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if info := next("the resignation"); info != (dlock.LeaderInfo{}) {
		t.Fatalf("saw %+v; want nobody", info)
	}
	b := leads(t, campaign(ctx, e, "b"), 10*time.Second)
	if info := next("b's leadership"); info.Value != "b" || info.Term <= a.Term() {
		t.Fatalf("saw %+v; want b at a term after %d", info, a.Term())
	}
	_ = b.Resign(ctx)
	stop()
	for range changes {
		// Drained until Observe closes the channel, which it must.
	}
}

func TestElectionLeaderLostHandsOverWithinTheTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := testCtx(t)
	name := t.Name()
	const ttl = time.Second
	dying := newClient(t, srv, dlock.WithTTL(ttl))
	a := leads(t, campaign(ctx, dying.Election(name), "a"), 10*time.Second)
	next := campaign(ctx, newClient(t, srv, dlock.WithTTL(ttl)).Election(name), "b")
	waitCampaigners(t, srv, name, 1)
	// The leader's process dies: its Client stops renewing, nothing is
	// released.
	began := time.Now()
	if err := dying.Close(); err != nil {
		t.Fatal(err)
	}
	b := leads(t, next, 20*time.Second)
	if took := time.Since(began); took > 10*ttl {
		t.Errorf("the next campaigner led %v after the leader died; want about the TTL (%v)", took, ttl)
	}
	if b.Term() <= a.Term() {
		t.Errorf("term %d after %d; want it larger", b.Term(), a.Term())
	}
	_ = b.Resign(ctx)
}

func TestElectionRunCampaignsAgainAfterALoss(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := testCtx(t)
	c := newClient(t, srv, dlock.WithTTL(3*time.Second)) // a loss is noticed within a second
	e := c.Election(t.Name())
	runCtx, stop := context.WithCancel(ctx)
	terms := make(chan int64, 4)
	causes := make(chan error, 4)
	done := make(chan error, 1)
	go func() {
		done <- e.Run(runCtx, "worker", func(ctx context.Context) error {
			info, err := e.Leader(ctx)
			if err != nil {
				return err
			}
			terms <- info.Term
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil
		})
	}()
	first := <-terms
	srv.Do(t, "DEL", lockKey(t.Name())+":election") // the lock taken away
	select {
	case cause := <-causes:
		if !errors.Is(cause, dlock.ErrLockLost) {
			t.Errorf("fn's context ended with %v; want ErrLockLost", cause)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("fn's context did not end after the leadership was lost")
	}
	select {
	case second := <-terms:
		if second <= first {
			t.Errorf("the second leadership's term %d is not after %d", second, first)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not campaign again after the loss")
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run after its ctx ended: %v; want context.Canceled", err)
	}
	if _, err := e.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Errorf("Leader after Run ended: %v; want ErrNoLeader (Run resigns)", err)
	}
}

// waitCampaigners waits until n campaigners are queued in election name.
func waitCampaigners(t testing.TB, srv *redistest.Server, name string, n int64) {
	t.Helper()
	rdb := srv.Client(t)
	waitFor(t, 10*time.Second, func() bool {
		return rdb.ZCard(context.Background(), lockKey(name)+":election:q").Val() == n
	}, fmt.Sprintf("%d campaigners queued in %q", n, name))
}

func TestElectionShowsInInspectAsItsOwnKind(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := testCtx(t)
	name := t.Name()
	c := newClient(t, srv)
	a := leads(t, campaign(ctx, c.Election(name, dlock.WithOwnerInfo("replica-a")), "a"), 10*time.Second)
	next := campaign(ctx, newClient(t, srv).Election(name, dlock.WithOwnerInfo("replica-b")), "b")
	waitCampaigners(t, srv, name, 1)
	mustLock(t, c, name) // a Mutex of the same name is a lock of its own

	infos, err := c.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var el *dlock.LockInfo
	kinds := map[dlock.Kind]bool{}
	for i := range infos {
		kinds[infos[i].Kind] = true
		if infos[i].Kind == dlock.KindElection {
			el = &infos[i]
		}
	}
	if el == nil || !kinds[dlock.KindMutex] {
		t.Fatalf("Inspect: %+v; want an election and a mutex", infos)
	}
	if len(el.Holders) != 1 || el.Holders[0].Info != "replica-a" || el.Holders[0].Token != a.Term() || el.LastToken != a.Term() {
		t.Errorf("the election's holder: %+v; want replica-a at term %d", el, a.Term())
	}
	if len(el.Waiters) != 1 || el.Waiters[0].Info != "replica-b" {
		t.Errorf("the election's waiters: %+v; want replica-b", el.Waiters)
	}
	listed, err := c.List(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, info := range listed {
		found = found || info.Kind == dlock.KindElection
	}
	if !found {
		t.Errorf("List: %+v; want the election", listed)
	}

	// ForceUnlock takes the leadership away; the next campaigner leads.
	if n, err := c.ForceUnlock(ctx, name); err != nil || n != 2 {
		t.Fatalf("ForceUnlock: %d, %v; want the election's leader and the mutex released", n, err)
	}
	b := leads(t, next, 10*time.Second)
	if b.Term() <= a.Term() {
		t.Errorf("term %d after %d", b.Term(), a.Term())
	}
	_ = b.Resign(ctx)
}
