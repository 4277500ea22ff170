package dlock_test

import (
	"context"
	"math/rand"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// settledGoroutines waits up to 30 s (the workers' idle period, twice, and
// some) for the count of goroutines (ourGoroutines) to fall to want, and
// returns it; with want 0, it waits briefly for it to stop moving.
func settledGoroutines(want int) int {
	deadline := time.Now().Add(30 * time.Second)
	if want == 0 {
		deadline = time.Now().Add(200 * time.Millisecond)
	}
	n := ourGoroutines()
	for time.Now().Before(deadline) && (want == 0 || n > want) {
		time.Sleep(20 * time.Millisecond)
		n = ourGoroutines()
	}
	return n
}

// ourGoroutines counts the goroutines but the test harness's (the
// redis-server processes and the proxy, whose goroutines come and go with
// the connections it carries).
func ourGoroutines() int {
	n := 0
	for _, g := range strings.Split(goroutineDump(), "\n\n") {
		if !strings.Contains(g, "dlock/internal/redistest.") {
			n++
		}
	}
	return n
}

func goroutineDump() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// countClients counts the server's client connections, besides the one
// asking; with subscribed, only those subscribed to some channel.
func countClients(t *testing.T, admin *redis.Client, subscribed bool) int {
	list, err := admin.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		if strings.Contains(line, "cmd=client|list") {
			continue
		}
		if !subscribed || !strings.Contains(line, " sub=0 ") || !strings.Contains(line, " ssub=0 ") && strings.Contains(line, " ssub=") {
			n++
		}
	}
	return n
}

// closeLeavingNoGoroutines closes each of closers (what names them in
// errors) and fails t if more of our goroutines are left than the
// goBefore there were before they were made.
func closeLeavingNoGoroutines(t *testing.T, goBefore int, what string, closers ...interface{ Close() error }) {
	t.Helper()
	for _, c := range closers {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	if n := settledGoroutines(goBefore); n > goBefore {
		t.Errorf("%d goroutines after Close, %d before %s:\n%s", n, goBefore, what, goroutineDump())
	}
}

// checkServerKeys fails t for any key without an expiry, and logs how many
// keys of each kind (the part after the name's braces) are left, and the
// longest time one has yet to live.
func checkServerKeys(t *testing.T, admin *redis.Client) {
	t.Helper()
	ctx := context.Background()
	type kind struct {
		n       int
		longest time.Duration
	}
	kinds := map[string]*kind{}
	var noTTL []string
	iter := admin.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		suffix := key
		if i := strings.LastIndex(key, "}"); i >= 0 {
			suffix = key[i+1:]
		}
		pttl, err := admin.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if pttl == -2 { // expired meanwhile
			continue
		}
		if pttl < 0 {
			noTTL = append(noTTL, key)
		}
		k := kinds[suffix]
		if k == nil {
			k = &kind{}
			kinds[suffix] = k
		}
		k.n++
		k.longest = max(k.longest, pttl)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	for suffix, k := range kinds {
		t.Logf("server: %d keys %q left, the last expiring in %v", k.n, suffix, k.longest.Round(time.Second))
	}
	if len(noTTL) > 0 {
		t.Errorf("%d keys without an expiry, such as %q", len(noTTL), noTTL[:min(5, len(noTTL))])
	}
}

// runSoakCycles runs cycle for each of cycles numbers, from 0, on workers
// goroutines (each with a random source of its own, seeded by its
// number), until they are all done or ctx ends.
func runSoakCycles(ctx context.Context, workers, cycles int, cycle func(i int, rnd *rand.Rand)) {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rnd := rand.New(rand.NewSource(seed))
			for {
				i := int(next.Add(1)) - 1
				if i >= cycles || ctx.Err() != nil {
					return
				}
				cycle(i, rnd)
			}
		}(int64(w))
	}
	wg.Wait()
}

// awaitNothingRetained polls what two holders retain (a service's Client
// and a rival's, say; named for the message) until neither keeps any
// per-name record, and fails the test if that takes longer than limit. It
// returns the first's last reading.
func awaitNothingRetained(t *testing.T, limit time.Duration, name string, retained func() dlock.Retained, otherName string, other func() dlock.Retained) dlock.Retained {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got, rv := retained(), other()
		if got.Records() == 0 && rv.Records() == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Errorf("%v after the last cycle %s retains %+v, %s %+v; want nothing", limit, name, got, otherName, rv)
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}
