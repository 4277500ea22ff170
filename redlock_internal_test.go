package dlock

import (
	"context"
	"errors"
	"math"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/hold"
	"github.com/dlock-go/dlock/internal/ownerid"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestRedlockQuorumSize(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4} {
		if got := quorum(n); got != want {
			t.Errorf("quorum(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestRedlockDriftMath(t *testing.T) {
	cases := []struct {
		px     time.Duration
		factor float64
		want   time.Duration
	}{
		{30 * time.Second, 0.01, 302 * time.Millisecond}, // the paper's allowance, like Mutex's
		{10 * time.Second, 0.1, 1002 * time.Millisecond},
		{time.Second, 0, 2 * time.Millisecond}, // only the expiry resolution
		{100 * time.Millisecond, 0.5, 52 * time.Millisecond},
	}
	for _, c := range cases {
		if got := redlockDrift(c.px, c.factor); got != c.want {
			t.Errorf("redlockDrift(%v, %v) = %v, want %v", c.px, c.factor, got, c.want)
		}
	}
	// The default factor gives a Redlock lease the same allowance as a Mutex lease.
	for _, px := range []time.Duration{10 * time.Millisecond, time.Second, 30 * time.Second, time.Hour} {
		if a, b := redlockDrift(px, defaultConfig().driftFactor), hold.Drift(px); a != b {
			t.Errorf("px %v: Redlock drift %v, Mutex drift %v", px, a, b)
		}
	}
}

func TestRedlockJudgeAcquire(t *testing.T) {
	const valid = time.Second
	cases := []struct {
		name               string
		n, granted, failed int // the rest are held by another owner
		elapsed            time.Duration
		want               acquireVerdict
	}{
		{"3: quorum in time", 3, 2, 1, 10 * time.Millisecond, verdictGranted},
		{"3: all granted", 3, 3, 0, 10 * time.Millisecond, verdictGranted},
		{"3: quorum too late", 3, 3, 0, valid, verdictTooSlow},
		{"3: all held", 3, 0, 0, 0, verdictContention},
		{"3: 1 held, 1 down", 3, 1, 1, 0, verdictContention},
		{"3: 2 down", 3, 1, 2, 0, verdictNoQuorum},
		{"3: all down", 3, 0, 3, 0, verdictNoQuorum},
		{"5: 2 held, 1 down", 5, 2, 1, 0, verdictContention},
		{"5: 3 held, 2 down", 5, 0, 2, 0, verdictContention},
		{"5: 1 held, 3 down", 5, 1, 3, 0, verdictNoQuorum},
		{"5: 2 held, 3 down", 5, 0, 3, 0, verdictNoQuorum},
		{"4: 2 down", 4, 2, 2, 0, verdictNoQuorum},
		{"4: 2 held, 1 down", 4, 1, 1, 0, verdictContention},
		{"1: granted", 1, 1, 0, 0, verdictGranted},
		{"1: down", 1, 0, 1, 0, verdictNoQuorum},
	}
	for _, c := range cases {
		if got := judgeAcquire(c.n, c.granted, c.failed, c.elapsed, valid); got != c.want {
			t.Errorf("%s: judgeAcquire = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestRedlockQuorumTimes(t *testing.T) {
	s := time.Second
	free := []struct {
		need    int
		holders []time.Duration
		want    time.Duration
	}{
		{1, []time.Duration{5 * s, s}, s},
		{2, []time.Duration{5 * s, s, 3 * s}, 3 * s},
		{3, []time.Duration{5 * s, s}, 0}, // needs a node that did not answer
		{0, []time.Duration{s}, 0},
	}
	for _, c := range free {
		if got := quorumFreeIn(c.need, c.holders); got != c.want {
			t.Errorf("quorumFreeIn(%d, %v) = %v, want %v", c.need, c.holders, got, c.want)
		}
	}
	remaining := []struct {
		q    int
		ours []time.Duration
		want time.Duration
		ok   bool
	}{
		{2, []time.Duration{10 * s, 3 * s, 7 * s}, 7 * s, true},
		{3, []time.Duration{s, 2 * s, 3 * s}, s, true},
		{2, []time.Duration{5 * s}, 0, false},
		{1, []time.Duration{4 * s, 9 * s}, 9 * s, true},
	}
	for _, c := range remaining {
		if got, ok := quorumRemaining(c.q, c.ours); got != c.want || ok != c.ok {
			t.Errorf("quorumRemaining(%d, %v) = %v, %v; want %v, %v", c.q, c.ours, got, ok, c.want, c.ok)
		}
	}
}

func TestRedlockNodeTimeoutDefault(t *testing.T) {
	cases := []struct {
		ttl, explicit time.Duration
		factor        float64
		want          time.Duration
	}{
		{30 * time.Second, 0, 0.01, 300 * time.Millisecond}, // TTL/100
		{time.Hour, 0, 0.01, 500 * time.Millisecond},        // capped
		{time.Second, 0, 0.01, 10 * time.Millisecond},       // floor
		{15 * time.Millisecond, 0, 0.01, 6425 * time.Microsecond},
		{time.Second, 0, 0.98, 9 * time.Millisecond}, // half the 18ms validity
		{30 * time.Second, 42 * time.Millisecond, 0.01, 42 * time.Millisecond},
	}
	for _, c := range cases {
		cfg := defaultConfig()
		cfg.ttl, cfg.nodeTimeout, cfg.driftFactor = c.ttl, c.explicit, c.factor
		if got := redlockNodeTimeout(&cfg); got != c.want {
			t.Errorf("TTL %v, factor %v, WithNodeTimeout(%v): node timeout %v, want %v", c.ttl, c.factor, c.explicit, got, c.want)
		}
		cfg.redlock = true
		if err := checkRedlockConfig(&cfg, &cfg); err != nil {
			t.Errorf("TTL %v, factor %v: the default is rejected: %v", c.ttl, c.factor, err)
		}
	}
	cfg := defaultConfig()
	cfg.redlock = true
	WithDriftFactor(math.NaN())(&cfg)
	if !errors.Is(cfg.err(), ErrInvalidArgument) {
		t.Error("a NaN drift factor was accepted")
	}
}

// newInternalRedlock is newRedlock for internal tests.
func newInternalRedlock(t *testing.T, addrs []string, opts ...Option) *Redlock {
	t.Helper()
	nodes := make([]RedisClient, len(addrs))
	for i, addr := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = rdb.Close() })
		nodes[i] = rdb
	}
	r, err := NewRedlock(nodes, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// TestRedlockValidityCountsFromTheStart checks that the time an acquisition
// takes is taken out of the lease's validity, with the Redlock's own drift
// factor.
func TestRedlockValidityCountsFromTheStart(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		p := redistest.StartProxy(t, s.Addr())
		p.SetLatency(10 * time.Millisecond) // each acquisition takes ≥ 20ms
		addrs[i] = p.Addr()
	}
	const ttl = 10 * time.Second
	r := newInternalRedlock(t, addrs, WithTTL(ttl), WithDriftFactor(0.1), WithNodeTimeout(time.Second))
	ctx := context.Background()
	before := time.Now()
	l, err := r.Mutex(t.Name()).TryLock(ctx)
	end := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	from, until := l.s.Validity()
	// Validity counts from before the requests were sent, so the round trip
	// through the proxies (≥ 20ms) is taken out of it.
	if from.Before(before) || end.Sub(from) < 20*time.Millisecond {
		t.Errorf("validity counts from %v after the call began and %v before it ended, want from the start of the requests",
			from.Sub(before), end.Sub(from))
	}
	if got, want := until.Sub(from), ttl-redlockDrift(ttl, 0.1); got != want {
		t.Errorf("validity %v, want TTL − drift = %v", got, want)
	}
}

// TestRedlockTooSlowAcquisitionRollsBack puts every node behind a proxy whose
// round trip exceeds the validity: the attempt fails with ErrQuorum (the
// node requests are bounded by the validity), and the shares that reach the
// nodes late are released.
func TestRedlockTooSlowAcquisitionRollsBack(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		p := redistest.StartProxy(t, s.Addr())
		p.SetLatency(30 * time.Millisecond)
		addrs[i] = p.Addr()
	}
	// TTL 5s, drift 4.952s: 48ms of validity, less than the 60ms round trip.
	r := newInternalRedlock(t, addrs, WithTTL(5*time.Second), WithDriftFactor(0.99))
	m := r.Mutex(t.Name())
	m.cfg.nodeTimeout = 2 * time.Second // past the validity: only the validity bounds the wait
	ctx := context.Background()
	start := time.Now()
	_, err := m.TryLock(ctx)
	if !errors.Is(err, ErrQuorum) || errors.Is(err, ErrNotObtained) {
		t.Fatalf("got %v, want ErrQuorum", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("TryLock took %v for a 48ms validity", d)
	}
	var ne *NodeError
	if !errors.As(err, &ne) || !errors.Is(ne, os.ErrDeadlineExceeded) {
		t.Errorf("want node timeouts, got %v", err)
	}
	// The SETs land after the attempt gave up; the releases follow them.
	waitFor(t, 2*time.Second, func() bool { // well before the 5s TTL
		for _, s := range servers {
			if s.Do(t, "EXISTS", "dlock:{"+t.Name()+"}") != int64(0) {
				return false
			}
		}
		return true
	}, "every node to release the late share")
}

// TestRedlockRenewalBoundedByValidity checks that a renewal succeeds only
// when a quorum answers within the validity it would give.
func TestRedlockRenewalBoundedByValidity(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	proxies := make([]*redistest.Proxy, len(servers))
	addrs := make([]string, len(servers))
	for i, s := range servers {
		proxies[i] = redistest.StartProxy(t, s.Addr())
		addrs[i] = proxies[i].Addr()
	}
	r := newInternalRedlock(t, addrs, WithTTL(10*time.Second), WithAutoRenew(false), WithNodeTimeout(500*time.Millisecond))
	ctx := context.Background()
	l, err := r.Mutex(t.Name()).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := l.h.(*redlockHold)
	for _, p := range proxies {
		p.SetLatency(30 * time.Millisecond)
	}
	if err := h.Renew(ctx, l.s.Owner(), 10*time.Second, false); err != nil {
		t.Errorf("renewal within its validity: %v", err)
	}
	// 40ms − 2.4ms of validity for a ≥ 60ms round trip. (The late PEXPIREs,
	// which may shorten, still land: the keys then expire by themselves.)
	if err := h.Renew(ctx, l.s.Owner(), 40*time.Millisecond, true); !errors.Is(err, ErrQuorum) {
		t.Errorf("renewal slower than its validity: got %v, want ErrQuorum", err)
	}
	for _, p := range proxies {
		p.SetLatency(0)
	}
	_ = l.Unlock(ctx)
}

// TestRedlockGiveBackFollowsItsRequest checks the order of a failed
// acquisition's give-backs: on a node whose request has not returned, the
// release waits for every request of the acquisition to return (a grant
// still on its way would otherwise land after it and stay), and giveBack
// reports the owner value spent; on nodes that answered, it goes at once.
func TestRedlockGiveBackFollowsItsRequest(t *testing.T) {
	servers := redistest.StartNodes(t, 3)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	r := newInternalRedlock(t, addrs, WithTTL(30*time.Second))
	m := r.Mutex(t.Name())
	ctx := context.Background()
	owner, err := ownerid.New("")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		s.Do(t, "SET", m.key, owner, "PX", "30000")
	}
	held := func(i int) bool { return servers[i].Do(t, "EXISTS", m.key) == int64(1) }

	// Node 0 granted, node 1 answered with a transport error, node 2 has
	// not answered yet.
	settled := make(chan struct{})
	which := []bool{true, true, true}
	replies := []nodeReply{{done: true, reply: int64(1)}, {done: true, err: errors.New("reset")}, {}}
	h := &redlockHold{m: m, tail: fanoutTail{settled: settled}, replies: replies}
	granted := []bool{true, false, false}
	if h.giveBack(ctx, owner, which, granted) {
		t.Error("giveBack reported every release answered while one waits for its request")
	}
	if held(0) {
		t.Error("node 0, which granted, still holds the share after giveBack returned")
	}
	waitFor(t, 5*time.Second, func() bool { return !held(1) }, "node 1, which answered, to give back its share")
	time.Sleep(100 * time.Millisecond) // the release to node 2 must not go yet
	if !held(2) {
		t.Fatal("node 2's share was given back before its request returned")
	}
	close(settled)
	waitFor(t, 5*time.Second, func() bool { return !held(2) }, "node 2's share given back once the requests had returned")

	// Every node answered: all given back at once, and the value may be
	// used again.
	for _, s := range servers {
		s.Do(t, "SET", m.key, owner, "PX", "30000")
	}
	replies = []nodeReply{{done: true, reply: int64(1)}, {done: true, reply: int64(1)}, {done: true, reply: int64(1)}}
	h = &redlockHold{m: m, tail: fanoutTail{settled: settled}, replies: replies}
	if !h.giveBack(ctx, owner, which, which) {
		t.Error("giveBack reported a release unanswered when every node answered")
	}
	for i := range servers {
		if held(i) {
			t.Errorf("node %d still holds the share", i)
		}
	}
}
