package dlockgocron_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	dlockgocron "github.com/dlock-go/dlock/adapters/gocron"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// runs records which scheduler ran the job, and when.
type runs struct {
	mu  sync.Mutex
	log []run
}

type run struct {
	scheduler int
	at        time.Time
}

func (r *runs) add(s int) {
	r.mu.Lock()
	r.log = append(r.log, run{s, time.Now()})
	r.mu.Unlock()
}

func (r *runs) since(t time.Time) []run {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []run
	for _, x := range r.log {
		if !x.at.Before(t) {
			out = append(out, x)
		}
	}
	return out
}

// newClient is a dlock Client of its own, as another host's would be.
func newClient(t *testing.T, srv *redistest.Server, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: srv.Password()})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestElectorRunsEachTickOnce: three schedulers, a job every second; the
// leader alone runs it, once per tick, and when its Client dies another
// takes the schedule over within the TTL.
func TestElectorRunsEachTickOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ttl = 2 * time.Second
	var r runs
	clients := make([]*dlock.Client, 3)
	electors := make([]*dlockgocron.Elector, 3)
	for i := range clients {
		clients[i] = newClient(t, srv, dlock.WithTTL(ttl))
		el, stop := dlockgocron.NewElector(ctx, clients[i], "reports", fmt.Sprintf("scheduler-%d", i))
		electors[i] = el
		t.Cleanup(stop)
		s, err := gocron.NewScheduler(gocron.WithDistributedElector(el))
		if err != nil {
			t.Fatal(err)
		}
		i := i
		if _, err := s.NewJob(gocron.DurationJob(time.Second), gocron.NewTask(func() { r.add(i) })); err != nil {
			t.Fatal(err)
		}
		s.Start()
		t.Cleanup(func() { _ = s.Shutdown() })
	}

	start := time.Now()
	deadline := start.Add(60 * time.Second)
	for len(r.since(start)) < 31 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // observing ticks: they come once a second
	}
	got := r.since(start)
	if len(got) < 31 {
		t.Fatalf("%d runs in 60s; want at least 31 (one a second)", len(got))
	}
	leader := got[0].scheduler
	for i, x := range got {
		if x.scheduler != leader {
			t.Fatalf("run %d by scheduler %d, while %d leads: %v", i, x.scheduler, leader, got)
		}
		if i > 0 && x.at.Sub(got[i-1].at) < 500*time.Millisecond {
			t.Fatalf("runs %d and %d %v apart: a tick ran twice", i-1, i, x.at.Sub(got[i-1].at))
		}
	}
	if err := electors[leader].IsLeader(ctx); err != nil {
		t.Fatalf("the leader's IsLeader: %v", err)
	}
	for i, el := range electors {
		if err := el.IsLeader(ctx); i != leader && !errors.Is(err, dlockgocron.ErrNotLeader) {
			t.Errorf("scheduler %d's IsLeader: %v; want ErrNotLeader", i, err)
		}
	}

	// The leader's host dies: its Client closes, renewing nothing more.
	killed := time.Now()
	_ = clients[leader].Close()
	deadline = killed.Add(ttl + 10*time.Second)
	var next []run
	for time.Now().Before(deadline) {
		next = nil
		for _, x := range r.since(killed) {
			if x.scheduler != leader {
				next = append(next, x)
			}
		}
		if len(next) >= 3 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(next) < 3 {
		t.Fatalf("no other scheduler took the schedule over within %v of the leader's death", deadline.Sub(killed))
	}
	if took := next[0].at.Sub(killed); took > ttl+2*time.Second {
		t.Errorf("the schedule moved %v after the leader died; want within the TTL (%v) and a tick", took, ttl)
	}
	for _, x := range r.since(killed.Add(100 * time.Millisecond)) {
		if x.scheduler == leader {
			t.Fatalf("the dead leader's scheduler ran the job %v after its Client closed", x.at.Sub(killed))
		}
	}
	for i := 1; i < len(next); i++ {
		if next[i].scheduler != next[0].scheduler || next[i].at.Sub(next[i-1].at) < 500*time.Millisecond {
			t.Fatalf("after the hand-over, runs %v: want one scheduler, once a tick", next)
		}
	}
}

// TestLockerRunsEachTickOnce: three schedulers whose jobs start at the same
// whole second, a job every second; each tick runs on exactly one of them.
func TestLockerRunsEachTickOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var r runs
	start := time.Now().Truncate(time.Second).Add(2 * time.Second)
	for i := 0; i < 3; i++ {
		lk := dlockgocron.NewLocker(newClient(t, srv))
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(lk))
		if err != nil {
			t.Fatal(err)
		}
		i := i
		if _, err := s.NewJob(gocron.DurationJob(time.Second), gocron.NewTask(func() { r.add(i) }),
			gocron.WithName("tick"), gocron.WithStartAt(gocron.WithStartDateTime(start))); err != nil {
			t.Fatal(err)
		}
		s.Start()
		t.Cleanup(func() { _ = s.Shutdown() })
	}
	deadline := start.Add(60 * time.Second)
	for len(r.since(start)) < 31 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // observing ticks: they come once a second
	}
	got := r.since(start)
	if len(got) < 31 {
		t.Fatalf("%d runs by %v; want one a second", len(got), deadline)
	}
	perTick := map[time.Time][]int{}
	for _, x := range got {
		tick := x.at.Round(time.Second)
		perTick[tick] = append(perTick[tick], x.scheduler)
	}
	for tick, who := range perTick {
		if len(who) != 1 {
			t.Errorf("the tick at %s ran on schedulers %v; want one", tick.Format("15:04:05"), who)
		}
	}
	if len(perTick) < 31 {
		t.Errorf("%d ticks ran out of %d runs", len(perTick), len(got))
	}
	if _, err := dlockgocron.NewLocker(newClient(t, srv), dlock.WithMinHold(time.Nanosecond)).Lock(context.Background(), "tick"); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Errorf("a Locker with a bad option: %v; want ErrInvalidArgument", err)
	}
	el, stop := dlockgocron.NewElector(context.Background(), newClient(t, srv), "", "v")
	defer stop()
	waitErr := time.Now().Add(10 * time.Second)
	for el.IsLeader(context.Background()) != nil && !errors.Is(el.IsLeader(context.Background()), dlock.ErrInvalidArgument) && time.Now().Before(waitErr) {
		time.Sleep(10 * time.Millisecond) // the campaign reports the bad name as it starts
	}
	if err := el.IsLeader(context.Background()); !errors.Is(err, dlock.ErrInvalidArgument) || !errors.Is(err, dlockgocron.ErrNotLeader) {
		t.Errorf("an Elector with an empty name: %v; want ErrNotLeader and ErrInvalidArgument", err)
	}
}
