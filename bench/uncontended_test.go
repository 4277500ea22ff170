package bench

import (
	"context"
	"fmt"
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
