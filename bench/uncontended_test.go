package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// BenchmarkUncontended is scenario 1 as a Go benchmark, for ns, bytes and
// allocations per lock+unlock pair: go test -bench Uncontended -benchmem.
//
// Each sub-benchmark runs exactly g goroutines on one client, each locking
// and unlocking its own key, b.N pairs in all. (b.RunParallel cannot run one
// goroutine, nor a count that is not a multiple of GOMAXPROCS.) ns/op is
// wall time divided by pairs; B/op and allocs/op count every goroutine of
// the process, the library's background ones included.
func BenchmarkUncontended(b *testing.B) {
	srv := NewServers(redistest.Start(b).Addr())
	b.Cleanup(func() { _ = srv.Close() })
	for _, t := range Targets() {
		if !t.Single || t.Tuned {
			continue
		}
		for _, g := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("%s/g=%d", t.Name, g), func(b *testing.B) {
				benchPairs(b, t, srv, g, false)
			})
		}
		if t.Name == DeadlineVariantOf {
			for _, g := range []int{1, 8, 64} {
				b.Run(fmt.Sprintf("%s%s/g=%d", t.Name, DeadlineSuffix, g), func(b *testing.B) {
					benchPairs(b, t, srv, g, true)
				})
			}
		}
	}
}

// benchPairs runs b.N pairs on g goroutines. As in RunUncontended, Lock
// gets a context that can be cancelled (as a request's can), with a
// deadline an hour away when deadline is set, and Unlock
// context.Background.
func benchPairs(b *testing.B, t Target, srv *Servers, g int, deadline bool) {
	ctx, cancel := context.WithCancel(context.Background())
	if deadline {
		ctx, cancel = context.WithTimeout(context.Background(), time.Hour)
	}
	defer cancel()
	if err := srv.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	l, err := t.New(Config{Addrs: srv.Addrs})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		b.StopTimer()
		_ = l.Close()
	}()
	keys := make([]string, g)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench:b:%d", i)
	}
	// Warm up: connections dialled, scripts loaded.
	if err := runPairs(ctx, l, keys, int64(4*g)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	if err := runPairs(ctx, l, keys, int64(b.N)); err != nil {
		b.Error(err)
	}
}

// runPairs runs n lock+unlock pairs on l from one goroutine per key.
func runPairs(ctx context.Context, l Locker, keys []string, n int64) error {
	var (
		next atomic.Int64
		errs errorLog
		wg   sync.WaitGroup
	)
	for _, key := range keys {
		wg.Add(1)
		go func(key string) {
			defer wg.Done()
			for next.Add(1) <= n {
				unlock, err := l.Lock(ctx, key)
				if err != nil {
					errs.add(fmt.Errorf("lock: %w", err))
					return
				}
				if err := unlock(context.Background()); err != nil {
					errs.add(fmt.Errorf("unlock: %w", err))
					return
				}
			}
		}(key)
	}
	wg.Wait()
	return errs.first
}

// TestUncontendedTurns: RunUncontendedInterleaved counts each target's
// pairs only in its own turns (its windows add up to dur, not to a turn
// per target per slice), and a turn that ends leaves no key locked behind.
func TestUncontendedTurns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	s := redistest.Start(t)
	srv := NewServers(s.Addr())
	defer srv.Close()
	var ts []Target
	for _, name := range []string{"floor", "dlock", "redsync"} {
		tg, ok := TargetByName(name)
		if !ok {
			t.Fatalf("no target %s", name)
		}
		ts = append(ts, tg)
	}
	const dur, slices = 600 * time.Millisecond, 3
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs, errs, err := RunUncontendedInterleaved(ctx, ts, srv, 2, 50*time.Millisecond, dur, slices, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if errs[i] != nil || r.Errors.Count > 0 || r.Pairs == 0 || r.Target != ts[i].Name {
			t.Errorf("%s: err %v, errors %+v, %d pairs", r.Target, errs[i], r.Errors, r.Pairs)
		}
		// Generous: each of the three windows may overrun its 200 ms by
		// 300 ms on a loaded machine; a window per turn of every target
		// would be three times as long.
		if e := r.Window.Elapsed; e < dur || e > dur+slices*300*time.Millisecond {
			t.Errorf("%s: windows add up to %v, want %v (in %d turns)", r.Target, e, dur, slices)
		}
		if r.Window.Client.Commands == 0 {
			t.Errorf("%s: no commands counted in its windows", r.Target)
		}
	}
	keys, ok := s.Do(t, "KEYS", "*").([]any)
	if !ok {
		t.Fatal("KEYS: not an array")
	}
	for _, k := range keys {
		if ks, _ := k.(string); !strings.HasSuffix(ks, ":fence") {
			t.Errorf("key %s left behind after the turns (locked?)", ks)
		}
	}
}
