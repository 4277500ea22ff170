package dlock

import (
	"errors"
	"fmt"
	"testing"

	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestCheckName(t *testing.T) {
	for name, ok := range map[string]bool{
		"orders:1001": true,
		"a{b":         true, // a '{' inside the tag is harmless
		"with space":  true,
		"{cart:7}:x":  true, // the tag is "{cart:7", shared by the cart's names
		"a}b":         true, // the tag is "a", the same for every key of the lock
		"":            false,
		"}":           false,
		"}a":          false, // an empty tag: each key hashed whole
	} {
		if err := checkName(name); (err == nil) != ok || (err != nil && !errors.Is(err, ErrInvalidArgument)) {
			t.Errorf("checkName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func TestLockKeys(t *testing.T) {
	for _, c := range []struct{ prefix, name string }{{"dlock:", "orders:1"}, {"", "x"}, {"app:", "{cart:7}:items"}} {
		k := newLockKeys(c.prefix, c.name)
		base := c.prefix + "{" + c.name + "}"
		want := []string{base, base + ":fence", base + ":q", base + ":w", base + ":held"}
		got := []string{k.lock, k.fence, k.queue, k.waiters, k.held}
		if len(k.list()) != 4 {
			t.Errorf("newLockKeys(%q, %q).list() = %q: want the four keys of the Mutex scripts", c.prefix, c.name, k.list())
		}
		for i := range want {
			if got[i] != want[i] || i < 4 && k.list()[i] != want[i] {
				t.Errorf("newLockKeys(%q, %q): key %d = %q (list: %q), want %q", c.prefix, c.name, i, got[i], k.list()[i], want[i])
			}
		}
		if at := newLockKeysAt(base); at != k {
			t.Errorf("newLockKeysAt(%q) = %+v, want %+v", base, at, k)
		}
		if fair, grants := newFairKeys(c.prefix, c.name, "1f"); fair != k || grants != base+":g1f" {
			t.Errorf("newFairKeys(%q, %q, \"1f\") = %+v, %q; want %+v, %q", c.prefix, c.name, fair, grants, k, base+":g1f")
		}
	}
}

func TestSemAndRWKeys(t *testing.T) {
	for _, c := range []struct{ prefix, name string }{{"dlock:", "orders:1"}, {"", "x"}, {"app:", "{cart:7}:items"}} {
		base := c.prefix + "{" + c.name + "}"
		s, settings := newSemKeys(c.prefix, c.name, []byte("1 2 PUBLISH"))
		got := []string{s.holders, s.counts, s.limit, s.fence, s.queue, s.waiters, s.calls, s.held}
		want := []string{base + ":sem", base + ":sem:n", base + ":sem:limit", base + ":sem:fence", base + ":sem:q", base + ":sem:w", base + ":sem:calls", base + ":sem:held"}
		if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(s.all) != fmt.Sprint(want[:6]) || settings != "1 2 PUBLISH" {
			t.Errorf("newSemKeys(%q, %q) = %q, all %q, settings %q; want %q", c.prefix, c.name, got, s.all, settings, want)
		}
		r := newRWKeys(c.prefix, c.name)
		got = []string{r.holders, r.fence, r.queue, r.waiters, r.tokens, r.held}
		want = []string{base + ":rw", base + ":rw:fence", base + ":rw:q", base + ":rw:w", base + ":rw:tok", base + ":rw:held"}
		renew := []string{want[0], want[4]}
		if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(r.all) != fmt.Sprint(want[:5]) || fmt.Sprint(r.renew) != fmt.Sprint(renew) {
			t.Errorf("newRWKeys(%q, %q) = %q, all %q, renew %q; want %q", c.prefix, c.name, got, r.all, r.renew, want)
		}
	}
}

// TestReentrantKeys: the ReentrantMutex's keys, cut from one string, are
// the ones every version before wrote (the lock's, then its holds set).
func TestReentrantKeys(t *testing.T) {
	t.Parallel()
	c := sharedClient(t)
	for _, name := range []string{"orders:1", "x", "{cart:7}:items"} {
		m := c.ReentrantMutex(name)
		base := c.cfg.keyPrefix + "{" + name + "}:re"
		want := []string{base, base + ":fence", base + ":q", base + ":w", base + ":holds", base + ":held"}
		got := []string{m.keys.lock, m.keys.fence, m.keys.queue, m.keys.waiters, m.holds, m.keys.held}
		if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(m.all) != fmt.Sprint(want[:5]) {
			t.Errorf("ReentrantMutex(%q) keys %q, all %q; want %q", name, got, m.all, want)
		}
	}
}

// descriptorSink keeps TestDescriptorAllocs's descriptors on the heap, as
// a caller's are.
var descriptorSink any

// TestDescriptorAllocs: a descriptor is two allocations, as a Mutex's is:
// itself, and one string for its keys (and the Semaphore's settings).
func TestDescriptorAllocs(t *testing.T) {
	c := sharedClient(t)
	for _, d := range []struct {
		kind string
		make func()
	}{
		{"Mutex", func() { descriptorSink = c.Mutex("orders:1") }},
		{"Semaphore", func() { descriptorSink = c.Semaphore("orders:1", 8) }},
		{"RWMutex", func() { descriptorSink = c.RWMutex("orders:1") }},
		{"ReentrantMutex", func() { descriptorSink = c.ReentrantMutex("orders:1") }},
	} {
		if n := testing.AllocsPerRun(100, d.make); n > 2 {
			t.Errorf("%s: %v allocations, want 2", d.kind, n)
		}
	}
	s := c.Semaphore("orders:1", 8)
	want := string(protocol.AppendSemSettings(nil, c.drv, 8, &s.ms))
	if s.settings != want {
		t.Errorf("Semaphore settings %q, want %q", s.settings, want)
	}
}

// sharedClient is a Client on the shared test server, closed when the test
// ends.
func sharedClient(t *testing.T) *Client {
	t.Helper()
	c, err := New(redistest.Shared(t).Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
