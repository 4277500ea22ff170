package dlockotel_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestFreeLock takes a free lock and releases it under a request's span:
// the acquire's span is the request's child, the Redis command runs under
// it, and the metrics carry the documented names, units and attributes (and
// no lock name).
func TestFreeLock(t *testing.T) {
	srv := redistest.Shared(t)
	tm := newTelemetry(t)
	rdb := srv.Client(t)
	hook := &spanHook{}
	rdb.AddHook(hook)
	c := newClient(t, rdb, dlock.WithObserver(tm.obs))
	name := t.Name()

	ctx, request := tm.tracer.Start(testCtx(t), "request")
	l, err := c.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	request.End()

	s := tm.onlySpan(t, "dlock.TryLock")
	if s.Parent().SpanID() != request.SpanContext().SpanID() {
		t.Errorf("the acquire's span is not the request's child")
	}
	if s.SpanKind() != trace.SpanKindInternal || s.Status().Code != codes.Unset {
		t.Errorf("span kind %v, status %v; want internal, unset", s.SpanKind(), s.Status())
	}
	a := spanAttrs(s)
	for k, want := range map[string]attribute.Value{
		"dlock.lock.name":        attribute.StringValue(name),
		"dlock.lock.kind":        attribute.StringValue("mutex"),
		"dlock.operation":        attribute.StringValue("TryLock"),
		"dlock.outcome":          attribute.StringValue("acquired"),
		"dlock.acquire.attempts": attribute.IntValue(1),
		"dlock.fence_token":      attribute.Int64Value(l.Token()),
	} {
		if a[k] != want {
			t.Errorf("span attribute %s = %v, want %v", k, a[k].Emit(), want.Emit())
		}
	}
	for _, k := range []string{"dlock.handoff.duration", "error.type"} {
		if _, ok := a[k]; ok {
			t.Errorf("span has %s for a free lock", k)
		}
	}
	if seen := hook.seen(); !slices.Contains(seen, s.SpanContext().SpanID()) {
		t.Errorf("no Redis command ran under the acquire's span (commands ran under %v)", seen)
	}

	// Unlock's event on the request's span.
	req := tm.onlySpan(t, "request")
	if len(req.Events()) != 1 || req.Events()[0].Name != "dlock.release" {
		t.Fatalf("request span events = %+v, want one dlock.release", req.Events())
	}
	ev := map[string]attribute.Value{}
	for _, kv := range req.Events()[0].Attributes {
		ev[string(kv.Key)] = kv.Value
	}
	if ev["dlock.outcome"].AsString() != "released" || ev["dlock.lock.name"].AsString() != name ||
		ev["dlock.fence_token"].AsInt64() != l.Token() || ev["dlock.hold.duration"].AsFloat64() <= 0 {
		t.Errorf("release event attributes = %v", req.Events()[0].Attributes)
	}

	m := tm.collect(t)
	acq := []string{"dlock.lock.kind=mutex", "dlock.operation=TryLock", "dlock.outcome=acquired"}
	if p := m.point(t, "dlock.acquire.duration", acq...); p.count != 1 || p.sum <= 0 || p.sum > 5 {
		t.Errorf("dlock.acquire.duration: count %d, sum %vs; want 1 acquire in (0, 5s]", p.count, p.sum)
	}
	if p := m.point(t, "dlock.acquire.attempts", acq...); p.count != 1 || p.sum != 1 {
		t.Errorf("dlock.acquire.attempts: count %d, sum %v; want 1 acquire of 1 attempt", p.count, p.sum)
	}
	if p := m.point(t, "dlock.hold.duration", "dlock.lock.kind=mutex", "dlock.outcome=released"); p.count != 1 || p.sum <= 0 {
		t.Errorf("dlock.hold.duration: count %d, sum %vs; want 1 hold", p.count, p.sum)
	}
	for name, unit := range map[string]string{"dlock.acquire.duration": "s", "dlock.acquire.attempts": "{attempt}", "dlock.hold.duration": "s"} {
		if m.units[name] != unit {
			t.Errorf("%s: unit %q, want %q", name, m.units[name], unit)
		}
	}
	for _, name := range []string{"dlock.handoff.duration", "dlock.renewals", "dlock.losses"} {
		if len(m.points[name]) > 0 {
			t.Errorf("%s recorded: %s", name, m.describe(name))
		}
	}
}

// TestHandOff waits for a lock that another process releases: the waiter
// gets it by hand-off, which both the span and dlock.handoff.duration show.
func TestHandOff(t *testing.T) {
	srv := redistest.Shared(t)
	tm := newTelemetry(t)
	c := tm.client(t, srv)
	other := newClient(t, srv.Client(t))
	ctx := testCtx(t)
	name := t.Name()

	// The waiter's first attempt queues it, and it subscribes to the
	// lock's channel beside its wait; once the subscription is in place it
	// asks once more, since a grant published before then went unheard.
	// That attempt may meet the release, and learn of the grant from its
	// reply, with the latency unknown (no dlock.handoff.duration, as
	// documented). The subscription lingers after the wait, so a second
	// waiter asks with it in place from the first attempt on, and hears of
	// its grant from the release: the hand-off is tried until one reports
	// its latency, which takes two tries at most.
	var a map[string]attribute.Value
	for try := 1; try <= 3 && a["dlock.handoff.duration"].AsFloat64() == 0; try++ {
		held, err := other.Mutex(name).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l, err := c.Mutex(name).Lock(ctx)
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
		waitQueued(t, ctx, srv.Client(t), name)
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		spans := tm.ended("dlock.Lock")
		if len(spans) != try {
			t.Fatalf("%d dlock.Lock spans after %d Locks", len(spans), try)
		}
		a = spanAttrs(spans[try-1])
		if a["dlock.outcome"].AsString() != "acquired" || a["dlock.acquire.attempts"].AsInt64() < 1 {
			t.Errorf("span outcome %v, attempts %v", a["dlock.outcome"].Emit(), a["dlock.acquire.attempts"].Emit())
		}
	}
	if h := a["dlock.handoff.duration"].AsFloat64(); h <= 0 || h > 5 {
		t.Errorf("span dlock.handoff.duration = %vs, want a hand-off latency in (0, 5s]", h)
	}
	m := tm.collect(t)
	if p := m.point(t, "dlock.handoff.duration", "dlock.lock.kind=mutex", "dlock.operation=Lock"); p.count != 1 || p.sum <= 0 || p.sum > 5 {
		t.Errorf("dlock.handoff.duration: count %d, sum %vs", p.count, p.sum)
	}
	if m.units["dlock.handoff.duration"] != "s" {
		t.Errorf("dlock.handoff.duration: unit %q", m.units["dlock.handoff.duration"])
	}
	m.point(t, "dlock.acquire.duration", "dlock.lock.kind=mutex", "dlock.operation=Lock", "dlock.outcome=acquired")
}

// TestNotAcquired covers the outcomes without the lock: contention on
// TryLock, a wait that ran out, a wait canceled, a key that is not dlock's
// and a closed Client. Only "error" and "timeout" mark the span as failed.
func TestNotAcquired(t *testing.T) {
	srv := redistest.Shared(t)
	tm := newTelemetry(t)
	c := tm.client(t, srv)
	other := newClient(t, srv.Client(t))
	admin := srv.Client(t)
	ctx := testCtx(t)
	name := t.Name()

	held, err := other.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)

	if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock of a held lock: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = c.Mutex(name).Lock(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with a deadline: %v", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := c.Mutex(name).Lock(canceled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock canceled: %v", err)
	}
	if err := admin.RPush(ctx, "dlock:{"+name+":list}", "not a lock").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Mutex(name + ":list").TryLock(ctx); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Fatalf("TryLock of a list: %v", err)
	}
	closed := tm.client(t, srv)
	_ = closed.Close()
	if _, err := closed.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("TryLock on a closed Client: %v", err)
	}

	type want struct {
		span, outcome, errType string
		status                 codes.Code
	}
	wants := []want{
		{"dlock.TryLock", "not_obtained", "", codes.Unset},
		{"dlock.Lock", "timeout", "", codes.Error},
		{"dlock.Lock", "canceled", "", codes.Unset},
		{"dlock.TryLock", "error", "key_conflict", codes.Error},
		{"dlock.TryLock", "error", "closed", codes.Error},
	}
	spans := tm.spans.Ended()
	if len(spans) != len(wants) {
		t.Fatalf("%d spans, want %d", len(spans), len(wants))
	}
	m := tm.collect(t)
	for i, w := range wants {
		s := spans[i]
		a := spanAttrs(s)
		if s.Name() != w.span || a["dlock.outcome"].AsString() != w.outcome || a["error.type"].AsString() != w.errType || s.Status().Code != w.status {
			t.Errorf("span %d: %s outcome=%q error.type=%q status=%v; want %+v",
				i, s.Name(), a["dlock.outcome"].AsString(), a["error.type"].AsString(), s.Status(), w)
		}
		if w.status == codes.Error && s.Status().Description == "" {
			t.Errorf("span %d: error status without a description", i)
		}
		if recorded := len(s.Events()) == 1 && s.Events()[0].Name == "exception"; recorded != (w.outcome == "error") {
			t.Errorf("span %d: events %+v; want the error recorded for outcome error only", i, s.Events())
		}
		attrs := []string{"dlock.lock.kind=mutex", "dlock.operation=" + s.Name()[len("dlock."):], "dlock.outcome=" + w.outcome}
		if w.errType != "" {
			attrs = append(attrs, "error.type="+w.errType)
		}
		if p := m.point(t, "dlock.acquire.duration", attrs...); p.count != 1 {
			t.Errorf("dlock.acquire.duration %v: count %d, want 1", attrs, p.count)
		}
		m.point(t, "dlock.acquire.attempts", attrs...)
	}
	if p := m.point(t, "dlock.acquire.duration", "dlock.lock.kind=mutex", "dlock.operation=Lock", "dlock.outcome=timeout"); p.sum < 0.1 {
		t.Errorf("the wait that timed out took %vs, want at least its 100ms deadline", p.sum)
	}
}

// TestRenewalsAndLoss holds a lock with a short TTL until it has been
// renewed, then deletes its key: the next renewal fails, the lease is lost,
// and Unlock finds it not held.
func TestRenewalsAndLoss(t *testing.T) {
	srv := redistest.Shared(t)
	tm := newTelemetry(t)
	c := tm.client(t, srv, dlock.WithTTL(time.Second)) // renewed every ~333ms
	ctx := testCtx(t)
	name := t.Name()

	l, err := c.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a renewal", func() bool {
		p, ok := tm.collect(t).find("dlock.renewals", "dlock.lock.kind=mutex", "dlock.outcome=ok")
		return ok && p.sum >= 1
	})
	if err := srv.Client(t).Del(ctx, "dlock:{"+name+"}").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease was not lost after its key was deleted")
	}
	// Done closes first; the watchdog tells the Observer of the failed
	// renewal, then of the loss, right after.
	waitFor(t, 10*time.Second, "the loss to be recorded", func() bool {
		_, ok := tm.collect(t).find("dlock.losses", "dlock.lock.kind=mutex")
		return ok
	})
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock of a lost lease: %v", err)
	}

	m := tm.collect(t)
	if p := m.point(t, "dlock.renewals", "dlock.lock.kind=mutex", "dlock.outcome=failed", "error.type=not_held"); p.sum != 1 {
		t.Errorf("failed renewals = %v, want 1", p.sum)
	}
	if p := m.point(t, "dlock.losses", "dlock.lock.kind=mutex"); p.sum != 1 {
		t.Errorf("losses = %v, want 1", p.sum)
	}
	if p := m.point(t, "dlock.hold.duration", "dlock.lock.kind=mutex", "dlock.outcome=not_held"); p.count != 1 || p.sum < 0.3 {
		t.Errorf("dlock.hold.duration: count %d, sum %vs; want one hold of at least a renewal period", p.count, p.sum)
	}
	for name, unit := range map[string]string{"dlock.renewals": "{renewal}", "dlock.losses": "{loss}"} {
		if m.units[name] != unit {
			t.Errorf("%s: unit %q, want %q", name, m.units[name], unit)
		}
	}
	// Renewals and losses happen outside any request: no spans.
	if n := len(tm.spans.Ended()); n != 1 {
		t.Errorf("%d spans, want only the acquire's", n)
	}
}

// TestFailedReleaseIsALoss: a release that fails (here, its reply held back
// past the release timeout) ends the lease as lost, since it may still reach
// Redis: the release is recorded with outcome "error" and the loss counted.
func TestFailedReleaseIsALoss(t *testing.T) {
	srv := redistest.Shared(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	tm := newTelemetry(t)
	c := newClient(t, redis.NewClient(&redis.Options{Addr: proxy.Addr()}),
		dlock.WithObserver(tm.obs), dlock.WithReleaseTimeout(200*time.Millisecond))
	ctx := testCtx(t)

	l, err := c.Mutex(t.Name()).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proxy.HoldReplies(true)
	err = l.Unlock(ctx)
	proxy.HoldReplies(false)
	if err == nil || errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock with its reply held back: %v, want a failed release", err)
	}
	if !errors.Is(l.Err(), dlock.ErrLockLost) {
		t.Fatalf("lease after a failed release: Err() = %v, want ErrLockLost", l.Err())
	}

	m := tm.collect(t)
	if p := m.point(t, "dlock.hold.duration", "dlock.lock.kind=mutex", "dlock.outcome=error", "error.type=timeout"); p.count != 1 {
		t.Errorf("dlock.hold.duration with outcome error: count %d, want 1", p.count)
	}
	if p := m.point(t, "dlock.losses", "dlock.lock.kind=mutex"); p.sum != 1 {
		t.Errorf("losses = %v, want 1", p.sum)
	}
}

// TestKinds checks the span names and kinds of a semaphore and a read lock.
func TestKinds(t *testing.T) {
	srv := redistest.Shared(t)
	tm := newTelemetry(t)
	c := tm.client(t, srv)
	ctx := testCtx(t)

	p, err := c.Semaphore(t.Name()+":sem", 2).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := c.RWMutex(t.Name() + ":rw").TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if a := spanAttrs(tm.onlySpan(t, "dlock.Acquire")); a["dlock.lock.kind"].AsString() != "semaphore" {
		t.Errorf("semaphore span kind %q", a["dlock.lock.kind"].AsString())
	}
	if a := spanAttrs(tm.onlySpan(t, "dlock.TryRLock")); a["dlock.lock.kind"].AsString() != "rwmutex" {
		t.Errorf("read lock span kind %q", a["dlock.lock.kind"].AsString())
	}
	m := tm.collect(t)
	m.point(t, "dlock.acquire.duration", "dlock.lock.kind=semaphore", "dlock.operation=Acquire", "dlock.outcome=acquired")
	m.point(t, "dlock.acquire.duration", "dlock.lock.kind=rwmutex", "dlock.operation=TryRLock", "dlock.outcome=acquired")
	m.point(t, "dlock.hold.duration", "dlock.lock.kind=semaphore", "dlock.outcome=released")
	m.point(t, "dlock.hold.duration", "dlock.lock.kind=rwmutex", "dlock.outcome=released")
}
