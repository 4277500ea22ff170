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
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu       sync.Mutex
	starts   []dlock.Acquisition
	outcomes []dlock.AcquireOutcome
	renewed  []error
	lost     []dlock.LeaseInfo
	released []dlock.LeaseInfo
	relErrs  []error
	// ctxSeen: a Redis command went out with the context AcquireStart
	// returned (ctxHook).
	ctxSeen bool
}

// ctxHook is a go-redis hook that tells rec when a command carries the
// context rec's AcquireStart returned: the one the acquire must run with.
type ctxHook struct{ rec *recorder }

func (h ctxHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h ctxHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.seen(ctx)
		return next(ctx, cmd)
	}
}

func (h ctxHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.seen(ctx)
		return next(ctx, cmds)
	}
}

func (h ctxHook) seen(ctx context.Context) {
	if ctx.Value(recorderCtxKey{}) != nil {
		h.rec.mu.Lock()
		h.rec.ctxSeen = true
		h.rec.mu.Unlock()
	}
}

type recorderCtxKey struct{}

func (r *recorder) AcquireStart(ctx context.Context, a dlock.Acquisition) (context.Context, func(dlock.AcquireOutcome)) {
	r.mu.Lock()
	r.starts = append(r.starts, a)
	r.mu.Unlock()
	return context.WithValue(ctx, recorderCtxKey{}, a.Op), func(o dlock.AcquireOutcome) {
		r.mu.Lock()
		r.outcomes = append(r.outcomes, o)
		r.mu.Unlock()
	}
}

func (r *recorder) Renewed(_ dlock.LeaseInfo, err error) {
	r.mu.Lock()
	r.renewed = append(r.renewed, err)
	r.mu.Unlock()
}

func (r *recorder) Lost(l dlock.LeaseInfo, err error) {
	r.mu.Lock()
	r.lost = append(r.lost, l)
	r.mu.Unlock()
}

func (r *recorder) Released(ctx context.Context, l dlock.LeaseInfo, err error) {
	r.mu.Lock()
	r.released = append(r.released, l)
	r.relErrs = append(r.relErrs, err)
	r.mu.Unlock()
}

func (r *recorder) snapshot() recorder {
	r.mu.Lock()
	defer r.mu.Unlock()
	return recorder{
		starts: append([]dlock.Acquisition(nil), r.starts...), outcomes: append([]dlock.AcquireOutcome(nil), r.outcomes...),
		renewed: append([]error(nil), r.renewed...), lost: append([]dlock.LeaseInfo(nil), r.lost...),
		released: append([]dlock.LeaseInfo(nil), r.released...), relErrs: append([]error(nil), r.relErrs...),
		ctxSeen: r.ctxSeen,
	}
}

func TestObserverSeesAcquiresReleasesRenewalsAndLosses(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rec := &recorder{}
	rdb := srv.Client(t)
	rdb.AddHook(ctxHook{rec})
	c := newClientOn(t, rdb, dlock.WithObserver(rec), dlock.WithTTL(300*time.Millisecond))
	other := newClient(t, srv)
	ctx := testCtx(t)
	name := t.Name()

	// A free lock: one attempt, no hand-off, sent with the context that
	// AcquireStart returned (where a span it started is the parent).
	l, err := c.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.snapshot().ctxSeen {
		t.Errorf("TryLock's script did not go out with the context AcquireStart returned")
	}
	time.Sleep(250 * time.Millisecond) // past a renewal (every 100ms)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	s := rec.snapshot()
	if len(s.starts) != 1 || s.starts[0].Op != "TryLock" || s.starts[0].Kind != dlock.KindMutex || s.starts[0].Name != name {
		t.Fatalf("starts = %+v", s.starts)
	}
	if o := s.outcomes[0]; o.Err != nil || o.Token != l.Token() || o.Attempts != 1 || o.Handoff != 0 {
		t.Errorf("free lock outcome = %+v", o)
	}
	if len(s.renewed) == 0 || s.renewed[0] != nil {
		t.Errorf("renewals seen: %v, want at least one successful", s.renewed)
	}
	if len(s.released) != 1 || s.released[0].Held < 200*time.Millisecond || s.relErrs[0] != nil {
		t.Errorf("released = %+v %v, want one after ~250ms held", s.released, s.relErrs)
	}

	handedOver := observeHandOffs(t, srv, c, other, rec, name)
	for _, o := range handedOver {
		if o.Err != nil || o.Attempts < 1 || o.Handoff < 0 || o.Handoff > 5*time.Second {
			t.Errorf("handed-over lock outcome = %+v", o)
		}
	}
	if o := handedOver[len(handedOver)-1]; o.Handoff <= 0 {
		t.Errorf("handed-over lock outcomes = %+v, want a positive hand-off latency from a grant message", handedOver)
	}

	// Not obtained.
	held := mustLock(t, other, name)
	_, err = c.Mutex(name).TryLock(ctx)
	s = rec.snapshot()
	if o := s.outcomes[len(s.outcomes)-1]; !errors.Is(o.Err, dlock.ErrNotObtained) || !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("contended TryLock outcome = %+v", o)
	}
	_ = held.Unlock(ctx)

	// A loss.
	l, err = c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Client(t).Del(ctx, lockKey(name))
	waitDone(t, l, 5*time.Second)
	// Done closes first; the Observer hears of the loss right after.
	waitFor(t, 5*time.Second, func() bool { return len(rec.snapshot().lost) > 0 }, "the Observer to hear of the loss")
	s = rec.snapshot()
	if len(s.lost) != 1 || s.lost[0].Name != name || s.lost[0].Token != l.Token() {
		t.Errorf("lost = %+v", s.lost)
	}
}

// observeHandOffs hands name over from other to c until rec hears of a
// hand-off with a latency, five times at most, and returns the outcomes
// rec heard. The waiter learns of its grant from the message, or, when the
// attempt it makes once subscribed meets the release, from that attempt's
// reply: then the hand-off latency is unknown (zero).
func observeHandOffs(t *testing.T, srv *redistest.Server, c, other *dlock.Client, rec *recorder, name string) []dlock.AcquireOutcome {
	t.Helper()
	ctx := testCtx(t)
	var handedOver []dlock.AcquireOutcome
	for try := 0; try < 5 && (len(handedOver) == 0 || handedOver[len(handedOver)-1].Handoff == 0); try++ {
		held := mustLock(t, other, name)
		got := lockThenUnlock(ctx, c.Mutex(name))
		waitQueued(t, srv, name, 1)
		waitFor(t, 10*time.Second, func() bool { // the waiter hears grants now
			n := srv.Client(t).PubSubNumSub(ctx, lockKey(name)).Val()[lockKey(name)]
			return n > 0
		}, "the waiter's subscription")
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		s := rec.snapshot()
		handedOver = append(handedOver, s.outcomes[len(s.outcomes)-1])
	}
	return handedOver
}

func TestObserverSeesEveryKind(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rec := &recorder{}
	c := newClient(t, srv, dlock.WithObserver(rec))
	ctx := dlock.WithOwner(testCtx(t), "job")
	p := t.Name() + ":"
	unlock := func(l *dlock.Lease, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Unlock(ctx)
	}
	unlock(c.FairMutex(p + "fair").Lock(ctx))
	unlock(c.ReentrantMutex(p + "re").Lock(ctx))
	unlock(c.RWMutex(p + "rw").RLock(ctx))
	unlock(c.MultiLock(p+"a", p+"b").TryLock(ctx))
	permits, err := c.Semaphore(p+"sem", 2).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	_ = permits.Release(ctx)
	want := []dlock.Acquisition{
		{Name: p + "fair", Kind: dlock.KindMutex, Op: "Lock"},
		{Name: p + "re", Kind: dlock.KindReentrant, Op: "Lock"},
		{Name: p + "rw", Kind: dlock.KindRWMutex, Op: "RLock"},
		{Name: p + "a," + p + "b", Kind: dlock.KindMutex, Op: "TryLock"},
		{Name: p + "sem", Kind: dlock.KindSemaphore, Op: "Acquire"},
	}
	s := rec.snapshot()
	if len(s.starts) != len(want) {
		t.Fatalf("starts = %+v, want %+v", s.starts, want)
	}
	for i := range want {
		if s.starts[i] != want[i] {
			t.Errorf("start %d = %+v, want %+v", i, s.starts[i], want[i])
		}
		if s.outcomes[i].Err != nil || s.outcomes[i].Attempts < 1 {
			t.Errorf("outcome %d = %+v", i, s.outcomes[i])
		}
	}
	if len(s.released) != len(want) {
		t.Errorf("%d releases seen, want %d", len(s.released), len(want))
	}
	if _, err := dlock.New(srv.Client(t), dlock.WithObserver(nil)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("WithObserver(nil): got %v, want ErrInvalidArgument", err)
	}
}

// A Redlock's acquires are observed as a Mutex's are (they were not, while
// its releases were), and so is a Mutex.Lock that a closed Client or an
// ended ctx refuses at once, as TryLock's were.
func TestObserverSeesRedlockAndRefusedLocks(t *testing.T) {
	t.Parallel()
	servers := redistest.StartNodes(t, 3)
	rec := &recorder{}
	r := newRedlock(t, addrsOf(servers), dlock.WithObserver(rec))
	ctx := testCtx(t)
	name := t.Name()
	l, err := r.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock of a held Redlock: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	c := newClient(t, redistest.Shared(t), dlock.WithObserver(rec))
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Mutex(name).Lock(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with an ended ctx: %v", err)
	}
	c.Close()
	if _, err := c.Mutex(name).Lock(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Lock on a closed Client: %v", err)
	}

	s := rec.snapshot()
	wantOps := []string{"Lock", "TryLock", "Lock", "Lock"}
	if len(s.starts) != len(wantOps) || len(s.outcomes) != len(wantOps) {
		t.Fatalf("starts %+v, outcomes %+v; want %d of each", s.starts, s.outcomes, len(wantOps))
	}
	for i, op := range wantOps {
		if s.starts[i].Op != op || s.starts[i].Kind != dlock.KindMutex || s.starts[i].Name != name {
			t.Errorf("start %d = %+v, want a Mutex's %s of %q", i, s.starts[i], op, name)
		}
	}
	if s.outcomes[0].Err != nil || s.outcomes[0].Attempts != 1 {
		t.Errorf("Redlock Lock's outcome = %+v, want a grant at the first attempt", s.outcomes[0])
	}
	if !errors.Is(s.outcomes[1].Err, dlock.ErrNotObtained) || s.outcomes[1].Attempts != 1 {
		t.Errorf("Redlock TryLock's outcome = %+v, want ErrNotObtained after one attempt", s.outcomes[1])
	}
	if !errors.Is(s.outcomes[2].Err, context.Canceled) || !errors.Is(s.outcomes[3].Err, dlock.ErrClosed) {
		t.Errorf("refused Locks' outcomes = %+v, %+v; want Canceled, then ErrClosed", s.outcomes[2], s.outcomes[3])
	}
	if len(s.released) != 1 {
		t.Errorf("%d releases seen, want the Redlock lease's", len(s.released))
	}
}

// A lock passed between goroutines of one Client reports its hand-off
// latency, measured on this host's clock: through the lock's queue in
// Redis, whose release tells the waiter from its reply before the grant
// message comes, and by a local hand-off in the Client's turn, from the
// transfer's reply.
func TestObserverSeesHandOffsWithinAClient(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rec := &recorder{}
	c := newClient(t, srv, dlock.WithObserver(rec))
	// The waiter that stands by in c's turn waits for the local hand-off
	// however slow the machine is, rather than queue in Redis after 10ms.
	dlock.SetStandbyGrace(c, time.Minute)
	other := newClient(t, srv)
	ctx := testCtx(t)
	name := t.Name()
	lastOutcome := func() dlock.AcquireOutcome {
		s := rec.snapshot()
		return s.outcomes[len(s.outcomes)-1]
	}
	// handOver takes name with c, has another goroutine of c wait for it
	// in Redis, unlocks, and returns the waiter's outcome.
	handOver := func() dlock.AcquireOutcome {
		t.Helper()
		held, err := c.Mutex(name).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := lockThenUnlock(ctx, c.Mutex(name))
		waitQueued(t, srv, name, 1)
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		return lastOutcome()
	}
	// A wait that subscribes c to the lock's channel asks once more when
	// the subscription is in place, and that attempt may meet the release
	// and learn of the grant from its reply (the latency unknown). So c
	// first waits for a lock other holds: its wait ends only once it has
	// heard from Redis, after the subscription is confirmed (a release of
	// c's own may end it sooner, and leave none). The subscription
	// lingers, and the measured wait's first attempt is made with it in
	// place: its grant comes from the release.
	held := mustLock(t, other, name)
	got := lockThenUnlock(ctx, c.Mutex(name))
	waitQueued(t, srv, name, 1)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return dlock.Subscribed(c, lockKey(name)) }, "c's subscription")
	if o := handOver(); o.Err != nil || o.Handoff <= 0 || o.Handoff > 5*time.Second {
		t.Errorf("hand-off through Redis within c: outcome %+v, want a hand-off latency in (0, 5s]", o)
	}

	first, second := beginTurn(ctx, t, srv, c, mustLock(t, other, name), name, true)
	if first == nil {
		t.FailNow()
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	s := rec.snapshot()
	// The outcomes of the turn: the first goroutine's, granted through
	// Redis by other's release, and the second's, handed over locally;
	// they end in either order.
	for _, o := range s.outcomes[len(s.outcomes)-2:] {
		if o.Err != nil || o.Handoff <= 0 || o.Handoff > 5*time.Second {
			t.Errorf("hand-off in c's turn: outcome %+v, want a hand-off latency in (0, 5s]", o)
		}
	}
}
