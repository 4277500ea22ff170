package dlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/goredis"
	"github.com/dlock-go/dlock/internal/redistest"
)

// uniqueName returns a lock name no other test, nor another run of this
// one (-count), uses on the shared server.
func uniqueName(t *testing.T) string { return uniquePrefix(t.Name() + "-") }

// uniquePrefix returns a key prefix no other test uses.
func uniquePrefix(base string) string {
	return base + redistest.RandomSuffix() + ":"
}

func names(infos []dlock.LockInfo) []string {
	var out []string
	for _, info := range infos {
		if len(out) == 0 || out[len(out)-1] != info.Name {
			out = append(out, info.Name)
		}
	}
	return out
}

func TestList(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	prefix := uniquePrefix("list*?[")
	c := newClient(t, srv, dlock.WithKeyPrefix(prefix))

	defer unlockLease(mustLock(t, c, "orders:1"))
	defer unlockLease(mustLock(t, c, "a"))
	defer unlockLease(mustLock(t, c, "a}b"))
	defer unlockLease(mustLock(t, c, "x*y"))
	r, err := c.RWMutex("orders:2").RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer unlockLease(r)
	p, err := c.Semaphore("{cart:7}:items", 2).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer releasePermits(p)
	if _, err := c.Latch("{cart:7}:total").TrySetCount(ctx, 2); err != nil {
		t.Fatal(err)
	}
	// Keys that are not dlock's, or under another prefix, are not listed.
	rdb.Set(ctx, prefix+"{zzz}:foreign", "x", time.Minute)
	rdb.Set(ctx, prefix+"plain", "x", time.Minute)
	other := newClient(t, srv, dlock.WithKeyPrefix(uniquePrefix("list-other")))
	defer unlockLease(mustLock(t, other, "orders:3"))

	all := []string{"a", "a}b", "orders:1", "orders:2", "x*y", "{cart:7}:items", "{cart:7}:total"}
	tests := []struct {
		pattern string
		want    []string
	}{
		{"", all},
		{"*", all},
		{"orders:*", []string{"orders:1", "orders:2"}},
		{"{cart:7}:*", []string{"{cart:7}:items", "{cart:7}:total"}},
		{"a", []string{"a"}}, // not "a}b", which SCAN's MATCH also returns
		{"a}*", []string{"a}b"}},
		{`x\*y`, []string{"x*y"}},
		{"orders:[2-9]", []string{"orders:2"}},
		{"nothing*", nil},
	}
	for _, tt := range tests {
		infos, err := c.List(ctx, tt.pattern)
		if err != nil {
			t.Errorf("List(%q): %v", tt.pattern, err)
			continue
		}
		if got := names(infos); !slices.Equal(got, tt.want) {
			t.Errorf("List(%q) = %q, want %q", tt.pattern, got, tt.want)
		}
	}

	infos, err := c.List(ctx, "{cart:7}:*")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].Kind != dlock.KindSemaphore || len(infos[0].Holders) != 1 ||
		infos[1].Kind != dlock.KindLatch || infos[1].Count != 2 {
		t.Errorf("List({cart:7}:*) = %+v, want the semaphore with its holder and the latch at 2", infos)
	}
}

func TestListKeepsOtherNamesOnAConflict(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := testCtx(t)
	prefix := uniquePrefix("conflict")
	c := newClient(t, srv, dlock.WithKeyPrefix(prefix))
	defer unlockLease(mustLock(t, c, "good"))
	rdb.RPush(ctx, prefix+"{bad}", "x")
	t.Cleanup(func() { rdb.Del(context.Background(), prefix+"{bad}") })

	infos, err := c.List(ctx, "")
	if !errors.Is(err, dlock.ErrKeyConflict) || !strings.Contains(err.Error(), `"bad"`) {
		t.Errorf("List: %v, want ErrKeyConflict naming \"bad\"", err)
	}
	if got := names(infos); !slices.Equal(got, []string{"good"}) {
		t.Errorf("List returned %q, want the good name", got)
	}
}

// noScanDriver is a driver that cannot list keys.
type noScanDriver struct{ driver.Driver }

func TestListWithoutScanner(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c, err := dlock.NewWithDriver(noScanDriver{goredis.New(srv.Client(t))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.List(testCtx(t), ""); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("List: %v, want errors.ErrUnsupported", err)
	}
	if infos, err := c.Inspect(testCtx(t), uniqueName(t)); err != nil || len(infos) != 0 {
		t.Errorf("Inspect still works without a Scanner: %v, %v", infos, err)
	}
}

// Close passes Client.Close on to the wrapped driver, which has goroutines.
func (d noScanDriver) Close() error {
	if c, ok := d.Driver.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}
