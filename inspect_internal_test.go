package dlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// TestInspectKeyLayout pins the keys inspect.lua reads, in its KEYS order,
// to the primitives' key constructors it takes them from.
func TestInspectKeyLayout(t *testing.T) {
	c, err := NewWithDriver(noDriver{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got []string
	for _, k := range c.inspectKeys("n") {
		got = append(got, strings.TrimPrefix(k, "dlock:{n}"))
	}
	want := []string{
		"", ":fence", ":q", ":w",
		":re", ":re:fence", ":re:q", ":re:w", ":re:holds",
		":rw", ":rw:fence", ":rw:q", ":rw:w", ":rw:tok",
		":sem", ":sem:n", ":sem:limit", ":sem:fence", ":sem:q", ":sem:w",
		":latch",
		":election", ":election:fence", ":election:q", ":election:w", ":election:leader",
		":held", ":re:held", ":rw:held", ":sem:held", ":election:held",
	}
	if !slices.Equal(got, want) {
		t.Errorf("inspect.lua's KEYS are\n%q\nwant\n%q\n(update inspect.lua with the primitives' keys)", got, want)
	}
}

// noDriver is a driver for tests that never reach Redis.
type noDriver struct{}

func (noDriver) Run(_ context.Context, calls ...*driver.Call) {
	for _, c := range calls {
		c.Err = errors.New("noDriver")
	}
}
func (noDriver) PublishCommand() string                       { return "PUBLISH" }
func (noDriver) Subscribe(driver.Handler) driver.Subscription { return nil }

func TestNameOfKey(t *testing.T) {
	c, err := NewWithDriver(noDriver{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	suffixes := c.keySuffixes()
	tests := []struct {
		key, name string
		ok        bool
	}{
		{"dlock:{orders:1}", "orders:1", true},
		{"dlock:{orders:1}:fence", "orders:1", true},
		{"dlock:{orders:1}:rw:tok", "orders:1", true},
		{"dlock:{{cart:7}:items}:sem:limit", "{cart:7}:items", true},
		{"dlock:{a}b}:latch", "a}b", true},
		{"dlock:{a}:other", "", false}, // not one of ours
		{"dlock:{}", "", false},        // empty name
		{"dlock:{}x}", "", false},      // a name starting with '}'
		{"other:{a}", "", false},       // another prefix
		{"dlock:{no-brace", "", false}, // no closing brace
		{"dlock:{a}:re:holds:x", "", false},
	}
	for _, tt := range tests {
		name, ok := nameOfKey(tt.key, "dlock:", suffixes)
		if name != tt.name || ok != tt.ok {
			t.Errorf("nameOfKey(%q) = %q, %v; want %q, %v", tt.key, name, ok, tt.name, tt.ok)
		}
	}
}

// TestForceReleaseLeavesANewHolderAlone releases by a stale reading: the
// holders it names are gone, and those holding now must keep their locks.
func TestForceReleaseLeavesANewHolderAlone(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := t.Name() + "-" + NewOwnerID()

	old := []*Lease{}
	lock := func(f func(context.Context) (*Lease, error)) *Lease {
		t.Helper()
		l, err := f(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	old = append(old,
		lock(c.Mutex(name).Lock),
		lock(func(ctx context.Context) (*Lease, error) { return c.ReentrantMutex(name).Lock(WithOwner(ctx, "job")) }),
		lock(c.RWMutex(name).Lock),
	)
	p, err := c.Semaphore(name, 1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	stale, err := c.inspect(ctx, "test", name)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale.held) != 4 {
		t.Fatalf("read %d holders, want 4", len(stale.held))
	}
	for _, l := range old {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// New holders of every kind, the reentrant one with the same identity
	// (another Client instance, so another owner).
	c2 := sharedClient(t)
	now := []*Lease{
		lock(c2.Mutex(name).Lock),
		lock(func(ctx context.Context) (*Lease, error) { return c2.ReentrantMutex(name).Lock(WithOwner(ctx, "job")) }),
		lock(c2.RWMutex(name).Lock),
	}
	p2, err := c2.Semaphore(name, 1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}

	if n, err := c.forceRelease(ctx, stale); n != 0 || err != nil {
		t.Errorf("forceRelease by a stale reading = %d, %v; want 0, nil", n, err)
	}
	for _, l := range now {
		if _, err := l.TTL(ctx); err != nil {
			t.Errorf("the new holder of %q lost its lock: %v", l.Name(), err)
		}
		_ = l.Unlock(ctx)
	}
	if _, err := p2.TTL(ctx); err != nil {
		t.Errorf("the new semaphore holder lost its permits: %v", err)
	}
	_ = p2.Release(ctx)
}
