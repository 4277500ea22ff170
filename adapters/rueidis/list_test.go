package dlockrueidis_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	dlockrueidis "github.com/dlock-go/dlock/adapters/rueidis"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/conformance"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestList: Client.List over rueidis finds the names of several kinds of
// primitive on a standalone server.
func TestList(t *testing.T) {
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	c := newClient(t, conformance.Target{Addrs: []string{srv.Addr()}}, dlock.WithKeyPrefix(t.Name()+":"))
	holdLocks(t, c, "orders:1", "orders:2")
	r, err := c.RWMutex("orders:3").RLock(ctx)
	if err != nil {
		t.Fatalf("RLock: %v", err)
	}
	t.Cleanup(func() { _ = r.Unlock(context.Background()) })
	p, err := c.Semaphore("{cart:7}:items", 2).Acquire(ctx, 1)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() { _ = p.Release(context.Background()) })

	for _, tc := range []struct {
		pattern string
		want    []string
	}{
		{"", []string{"orders:1", "orders:2", "orders:3", "{cart:7}:items"}},
		{"orders:[2-9]", []string{"orders:2", "orders:3"}},
		{"{cart:7}:*", []string{"{cart:7}:items"}},
		{"nothing*", nil},
	} {
		infos, err := c.List(ctx, tc.pattern)
		if err != nil {
			t.Errorf("List(%q): %v", tc.pattern, err)
			continue
		}
		if got := namesOf(infos); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q) = %q, want %q", tc.pattern, got, tc.want)
		}
	}
}

// TestScan: the driver's SCAN loop visits every matching key however many
// round trips it takes, stops when told, and respects its context.
func TestScan(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := t.Name() + ":"
	const n = 2500 // SCAN's COUNT is 1000: several round trips
	want := setKeys(t, prefix, n, func(ctx context.Context, key string) error {
		return rdb.Set(ctx, key, "x", time.Minute).Err()
	})
	t.Cleanup(func() { rdb.Del(context.Background(), want...) })
	testScan(t, scanner(t, conformance.Target{Addrs: []string{srv.Addr()}}), prefix, want, 2)
}

// TestListOnACluster: List and the driver's Scan cover every master of a
// Cluster, and none of its replicas.
func TestListOnACluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	target := conformance.Target{Addrs: cl.Addrs(), Cluster: true}
	ctx := testCtx(t)

	rdb := cl.Client(t)
	const n = 300
	want := setKeys(t, "scan:", n, func(ctx context.Context, key string) error {
		return rdb.Set(ctx, key, "x", time.Minute).Err()
	})
	// Each key is on one master and, once replicated, on its replica too:
	// scanning replicas would visit it twice.
	waitFor(t, 10*time.Second, func() bool { return dbSize(t, cl.Replicas(t)) == n }, "the replicas to have every key")
	for _, m := range cl.Masters(t) {
		if dbSize(t, []*redistest.Server{m}) == 0 {
			t.Fatalf("master %s has none of the %d keys: Scan would not need to visit it", m.Addr(), n)
		}
	}
	testScan(t, scanner(t, target), "scan:", want, 1)

	c := newClient(t, target)
	var names []string
	masters := map[string]bool{}
	for i := 0; i < 30; i++ {
		name := fmt.Sprintf("%s:%02d", t.Name(), i)
		names = append(names, name)
		masters[cl.MasterForSlot(t, redistest.KeySlot("dlock:{"+name+"}")).Addr()] = true
	}
	if len(masters) != 3 {
		t.Fatalf("the names are on %d masters, want all 3", len(masters))
	}
	holdLocks(t, c, names...)
	infos, err := c.List(ctx, t.Name()+":*")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if got := namesOf(infos); !slices.Equal(got, names) {
		t.Errorf("List = %q, want %q", got, names)
	}
}

// testScan scans for the keys under prefix, which are want, and checks
// that each is visited at least once and at most maxVisits times, that
// Scan stops when told, and that it respects its context.
func testScan(t *testing.T, s driver.Scanner, prefix string, want []string, maxVisits int) {
	t.Helper()
	ctx := testCtx(t)
	visits := map[string]int{}
	if err := s.Scan(ctx, prefix+"*", func(key string) bool {
		visits[key]++
		return true
	}); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	var got []string
	for k, v := range visits {
		got = append(got, k)
		// SCAN may return a key twice when the table is resized meanwhile:
		// more visits than that mean replicas were scanned too.
		if v > maxVisits {
			t.Errorf("Scan visited %q %d times", k, v)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("Scan found %d keys, want the %d under %q", len(got), len(want), prefix)
	}

	calls := 0
	if err := s.Scan(ctx, prefix+"*", func(string) bool {
		calls++
		return false
	}); err != nil || calls != 1 {
		t.Errorf("Scan told to stop at the first key: %v after %d calls, want nil after 1", err, calls)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	err := s.Scan(cancelled, prefix+"*", func(string) bool { return true })
	named := err != nil && (strings.Contains(err.Error(), "SCAN") || strings.Contains(err.Error(), "ROLE"))
	if !errors.Is(err, context.Canceled) || !named {
		t.Errorf("Scan with a cancelled context: %v, want context.Canceled naming the command", err)
	}
}

// scanner returns the driver for target as a driver.Scanner.
func scanner(t *testing.T, target conformance.Target) driver.Scanner {
	t.Helper()
	s, ok := dlockrueidis.NewDriver(newRueidis(t, target)).(driver.Scanner)
	if !ok {
		t.Fatal("the driver does not implement driver.Scanner")
	}
	return s
}

// setKeys sets n keys under prefix with set, through the harness's
// go-redis client rather than the client under test, and returns them
// sorted.
func setKeys(t *testing.T, prefix string, n int, set func(ctx context.Context, key string) error) []string {
	t.Helper()
	ctx := testCtx(t)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%04d", prefix, i)
		if err := set(ctx, keys[i]); err != nil {
			t.Fatalf("SET %s: %v", keys[i], err)
		}
	}
	return keys
}

// dbSize sums the DBSIZE of servers.
func dbSize(t *testing.T, servers []*redistest.Server) int64 {
	t.Helper()
	var sum int64
	for _, s := range servers {
		sum += s.Do(t, "DBSIZE").(int64)
	}
	return sum
}

// holdLocks locks each name on c until the test ends.
func holdLocks(t *testing.T, c *dlock.Client, names ...string) {
	t.Helper()
	for _, name := range names {
		l, err := c.Mutex(name).Lock(testCtx(t))
		if err != nil {
			t.Fatalf("Lock(%q): %v", name, err)
		}
		t.Cleanup(func() { _ = l.Unlock(context.Background()) })
	}
}

// namesOf returns the names of infos, in order, without repeats.
func namesOf(infos []dlock.LockInfo) []string {
	var out []string
	for _, info := range infos {
		if len(out) == 0 || out[len(out)-1] != info.Name {
			out = append(out, info.Name)
		}
	}
	return out
}
