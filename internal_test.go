package dlock

import (
	"errors"
	"fmt"
	"testing"

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
		want := []string{base, base + ":fence", base + ":q", base + ":w"}
		got := []string{k.lock, k.fence, k.queue, k.waiters}
		for i := range want {
			if got[i] != want[i] || k.list()[i] != want[i] {
				t.Errorf("newLockKeys(%q, %q): key %d = %q (list: %q), want %q", c.prefix, c.name, i, got[i], k.list()[i], want[i])
			}
		}
		if at := newLockKeysAt(base); at.lock != k.lock || at.fence != k.fence || at.queue != k.queue || at.waiters != k.waiters {
			t.Errorf("newLockKeysAt(%q) = %+v, want %+v", base, at, k)
		}
	}
}

func TestSemAndRWKeys(t *testing.T) {
	for _, c := range []struct{ prefix, name string }{{"dlock:", "orders:1"}, {"", "x"}, {"app:", "{cart:7}:items"}} {
		base := c.prefix + "{" + c.name + "}"
		s := newSemKeys(c.prefix, c.name)
		got := []string{s.holders, s.counts, s.limit, s.fence, s.queue, s.waiters, s.calls}
		want := []string{base + ":sem", base + ":sem:n", base + ":sem:limit", base + ":sem:fence", base + ":sem:q", base + ":sem:w", base + ":sem:calls"}
		if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(s.all) != fmt.Sprint(want[:6]) || cap(s.all) != 6 {
			t.Errorf("newSemKeys(%q, %q) = %q, all %q (cap %d); want %q", c.prefix, c.name, got, s.all, cap(s.all), want)
		}
		r := newRWKeys(c.prefix, c.name)
		got = []string{r.holders, r.fence, r.queue, r.waiters, r.tokens}
		want = []string{base + ":rw", base + ":rw:fence", base + ":rw:q", base + ":rw:w", base + ":rw:tok"}
		if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(r.all) != fmt.Sprint(want) || fmt.Sprint(r.renew) != fmt.Sprint([]string{want[0], want[4]}) {
			t.Errorf("newRWKeys(%q, %q) = %q, all %q, renew %q; want %q", c.prefix, c.name, got, r.all, r.renew, want)
		}
	}
}

// TestReentrantKeys: the ReentrantMutex's keys, cut from one string, are
// the ones every version before wrote (the lock's, then its holds set).
func TestReentrantKeys(t *testing.T) {
	c := sharedClient(t)
	for _, name := range []string{"orders:1", "x", "{cart:7}:items"} {
		m := c.ReentrantMutex(name)
		base := c.cfg.keyPrefix + "{" + name + "}:re"
		want := []string{base, base + ":fence", base + ":q", base + ":w", base + ":holds"}
		got := []string{m.keys.lock, m.keys.fence, m.keys.queue, m.keys.waiters, m.holds}
		if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(m.all) != fmt.Sprint(want) {
			t.Errorf("ReentrantMutex(%q) keys %q, all %q; want %q", name, got, m.all, want)
		}
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
