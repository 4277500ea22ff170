package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
)

var listTests = []test{
	{"FindsEveryKind", testListFindsEveryKind},
}

// testListFindsEveryKind: Client.List finds the names of several kinds of
// primitive on a standalone server.
func testListFindsEveryKind(t *testing.T, newClient NewClientFunc) {
	srv := redistest.Shared(t)
	ctx := testCtx(t)
	c := newClient(t, srv, dlock.WithKeyPrefix(t.Name()+":"))
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

// RunScanner runs, as parallel subtests of t, the tests of the driver's
// driver.Scanner: its SCAN loop, on a standalone server and on every master
// (and no replica) of a Cluster, and Client.List over the Cluster, with
// Clients from dlock.NewWithDriver. Like Run, it needs TestMain to call
// redistest.Main. It takes a few seconds, most of them starting a Cluster.
//
// It is not part of RunDriver because it starts a Cluster of its own. It
// also checks that Scan's errors name the command that failed (SCAN, or ROLE
// on a Cluster).
func RunScanner(t *testing.T, newDriver NewDriverFunc) {
	newDriver = closing(newDriver)
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, newDriver NewDriverFunc)
	}{
		{"ScanVisitsEveryKey", testScanVisitsEveryKey},
		{"ListAndScanOnACluster", testListAndScanOnACluster},
	} {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newDriver)
		})
	}
}

// testScanVisitsEveryKey: the driver's SCAN loop visits every matching key
// however many round trips it takes, stops when told, and respects its
// context.
func testScanVisitsEveryKey(t *testing.T, newDriver NewDriverFunc) {
	srv := redistest.Shared(t)
	rdb := inspector(t, srv)
	prefix := t.Name() + ":"
	const n = 2500 // SCAN's COUNT is 1000: several round trips
	want := setKeys(t, rdb, prefix, n)
	t.Cleanup(func() { rdb.Del(context.Background(), want...) })
	checkScan(t, scanner(t, newDriver(t, target(srv))), prefix, want, 2)
}

// testListAndScanOnACluster: List and the driver's Scan cover every master
// of a Cluster, and none of its replicas.
func testListAndScanOnACluster(t *testing.T, newDriver NewDriverFunc) {
	cl := redistest.StartCluster(t, 3, 1)
	target := Target{Addrs: cl.Addrs(), Cluster: true}
	ctx := testCtx(t)

	const n = 300
	want := setKeys(t, cl.Client(t), "scan:", n)
	// Each key is on one master and, once replicated, on its replica too:
	// scanning replicas would visit it twice.
	waitFor(t, 10*time.Second, func() bool { return dbSize(t, cl.Replicas(t)) == n }, "the replicas to have every key")
	for _, m := range cl.Masters(t) {
		if dbSize(t, []*redistest.Server{m}) == 0 {
			t.Fatalf("master %s has none of the %d keys: Scan would not need to visit it", m.Addr(), n)
		}
	}
	checkScan(t, scanner(t, newDriver(t, target)), "scan:", want, 1)

	c := clientOver(t, newDriver(t, target))
	var names []string
	masters := map[string]bool{}
	for i := 0; i < 30; i++ {
		name := fmt.Sprintf("%s:%02d", t.Name(), i)
		names = append(names, name)
		masters[cl.MasterForSlot(t, redistest.KeySlot(lockKey(name))).Addr()] = true
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

// checkScan scans for the keys under prefix, which are want, and checks
// that each is visited at least once and at most maxVisits times, that
// Scan stops when told, and that it respects its context.
func checkScan(t *testing.T, s driver.Scanner, prefix string, want []string, maxVisits int) {
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

// scanner returns d as a driver.Scanner, or fails t.
func scanner(t testing.TB, d driver.Driver) driver.Scanner {
	t.Helper()
	s, ok := d.(driver.Scanner)
	if !ok {
		t.Fatalf("the driver %T does not implement driver.Scanner", d)
	}
	return s
}

// setKeys sets n keys under prefix with rdb, a client of the harness rather
// than the client under test, and returns them sorted.
func setKeys(t testing.TB, rdb redis.Cmdable, prefix string, n int) []string {
	t.Helper()
	ctx := testCtx(t)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%04d", prefix, i)
		if err := rdb.Set(ctx, keys[i], "x", time.Minute).Err(); err != nil {
			t.Fatalf("SET %s: %v", keys[i], err)
		}
	}
	return keys
}

// dbSize sums the DBSIZE of servers.
func dbSize(t testing.TB, servers []*redistest.Server) int64 {
	t.Helper()
	var sum int64
	for _, s := range servers {
		sum += s.Do(t, "DBSIZE").(int64)
	}
	return sum
}

// holdLocks locks each name on c until the test ends.
func holdLocks(t testing.TB, c *dlock.Client, names ...string) {
	t.Helper()
	for _, name := range names {
		l := mustLock(t, c, name)
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
