package fence_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/keyslot"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newStore(t *testing.T, rdb redis.Scripter, opts ...fence.Option) *fence.Store {
	t.Helper()
	s, err := fence.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStaleTokensAreRefusedForReadsAndWrites(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	s := newStore(t, rdb)
	ctx := ctxFor(t)
	key := "{" + redistest.UniqueName(t) + "}"

	if _, ok, err := s.Get(ctx, key, 5); err != nil || ok {
		t.Fatalf("Get of an absent key: ok=%v err=%v", ok, err)
	}
	// The read raised the mark: a lower token can no longer write.
	err := s.Set(ctx, key, "from 4", 4)
	var se *fence.StaleTokenError
	if !errors.Is(err, fence.ErrStaleToken) || !errors.As(err, &se) || se.Highest != 5 || se.Token != 4 || se.Op != "Set" {
		t.Fatalf("Set with 4 after a read with 5: %v, want a StaleTokenError of Set with Highest 5", err)
	}
	if err := s.Set(ctx, key, "from 5", 5); err != nil {
		t.Fatalf("Set with the same token: %v", err)
	}
	if err := s.Set(ctx, key, "from 5 again", 5); err != nil {
		t.Fatalf("a second Set with the same token: %v", err)
	}
	if err := s.Set(ctx, key, "from 7", 7); err != nil {
		t.Fatalf("Set with a higher token: %v", err)
	}
	if _, _, err := s.Get(ctx, key, 6); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Get with 6 after 7 wrote: %v, want ErrStaleToken", err)
	}
	if v, ok, err := s.Get(ctx, key, 7); err != nil || !ok || v != "from 7" {
		t.Fatalf("Get with 7 = %q, %v, %v", v, ok, err)
	}
	if v := rdb.Get(ctx, key).Val(); v != "from 7" {
		t.Errorf("plain GET sees %q", v)
	}
}

func TestTokensCompareExactlyBeyondFloatPrecision(t *testing.T) {
	s := newStore(t, redistest.Shared(t).Client(t))
	ctx := ctxFor(t)
	key := "{" + redistest.UniqueName(t) + "}"
	const big = 1<<53 + 1 // a double rounds it to 2^53
	if err := s.Set(ctx, key, "big", big); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(ctx, key, "one less", big-1); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("token 2^53 after 2^53+1: %v, want ErrStaleToken", err)
	}
	if err := s.Set(ctx, key, "max", 1<<63-1); err != nil {
		t.Fatalf("the largest token: %v", err)
	}
	if _, _, err := s.Get(ctx, key, 1<<63-2); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("a token one below the largest: %v, want ErrStaleToken", err)
	}
}

// TestUpdateLosesNoUpdates runs fenced increments from holders whose
// tokens interleave as they would after lock hand-overs with a paused
// holder: every increment that returns nil is in the final value.
func TestUpdateLosesNoUpdates(t *testing.T) {
	s := newStore(t, redistest.Shared(t).Client(t))
	ctx := ctxFor(t)
	key := "{" + redistest.UniqueName(t) + "}"
	incr := func(old string, ok bool) (string, error) {
		n, _ := strconv.Atoi(old)
		return strconv.Itoa(n + 1), nil
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		accepted int
	)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				token := int64(i*8 + g + 1) // holders race with close tokens
				_, err := s.Update(ctx, key, token, incr)
				switch {
				case err == nil:
					mu.Lock()
					accepted++
					mu.Unlock()
				case !errors.Is(err, fence.ErrStaleToken):
					t.Errorf("Update: %v", err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	v, _, err := s.Get(ctx, key, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	if v != strconv.Itoa(accepted) {
		t.Errorf("value %s after %d accepted increments: an update was lost", v, accepted)
	}
	if accepted == 0 {
		t.Error("no increment was accepted")
	}
}

func TestUpdateWritesNothingWhenFnFails(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	s := newStore(t, rdb)
	ctx := ctxFor(t)
	key := "{" + redistest.UniqueName(t) + "}"
	boom := errors.New("boom")
	if _, err := s.Update(ctx, key, 1, func(string, bool) (string, error) { return "", boom }); !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want fn's error", err)
	}
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Error("Update wrote although fn failed")
	}
}

func TestMarksLiveAsLongAsValues(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ctx := ctxFor(t)
	key := "{" + redistest.UniqueName(t) + "}"
	mark, _ := fence.MarkKey(key)

	s := newStore(t, rdb, fence.WithTTL(time.Minute))
	if _, _, err := s.Get(ctx, key+"absent", 1); err != nil {
		t.Fatal(err)
	}
	absentMark, _ := fence.MarkKey(key + "absent")
	if d := rdb.PTTL(ctx, absentMark).Val(); d <= 0 || d > time.Minute {
		t.Errorf("mark of a read of an absent value: PTTL %v, want the store's TTL", d)
	}
	if err := s.Set(ctx, key, "v", 3); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{key, mark} {
		if d := rdb.PTTL(ctx, k).Val(); d <= 0 || d > time.Minute {
			t.Errorf("%s: PTTL %v, want the store's TTL", k, d)
		}
	}
	// A later read with a higher token keeps the value's expiry on the mark.
	if _, _, err := s.Get(ctx, key, 4); err != nil {
		t.Fatal(err)
	}
	if d := rdb.PTTL(ctx, mark).Val(); d <= 0 {
		t.Errorf("mark after a read: PTTL %v, want the value's", d)
	}

	persistent := newStore(t, rdb)
	if err := persistent.Set(ctx, key, "v", 5); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{key, mark} {
		if d := rdb.PTTL(ctx, k).Val(); d != -1 {
			t.Errorf("%s without WithTTL: PTTL %v, want none (-1)", k, d)
		}
	}
}

func TestForeignKeysConflictAndAreLeftAlone(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	s := newStore(t, rdb)
	ctx := ctxFor(t)
	list := "{" + redistest.UniqueName(t) + "}:list"
	rdb.RPush(ctx, list, "x")
	if err := s.Set(ctx, list, "v", 1); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Errorf("Set on a list: %v, want ErrKeyConflict", err)
	}
	if _, _, err := s.Get(ctx, list, 1); !errors.Is(err, dlock.ErrKeyConflict) || strings.Contains(err.Error(), "user_script") {
		t.Errorf("Get on a list: %v, want ErrKeyConflict without the script's location", err)
	}
	if rdb.Type(ctx, list).Val() != "list" {
		t.Error("the list was modified")
	}
	mark, _ := fence.MarkKey(list)
	if n := rdb.Exists(ctx, mark).Val(); n != 0 {
		t.Error("a mark was written for a key that is not ours")
	}

	key := "{" + redistest.UniqueName(t) + "}:badmark"
	mark, _ = fence.MarkKey(key)
	rdb.Set(ctx, mark, "not a token", 0)
	if err := s.Set(ctx, key, "v", 1); !errors.Is(err, dlock.ErrKeyConflict) {
		t.Errorf("Set with a garbled mark: %v, want ErrKeyConflict", err)
	}
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Error("a value was written past a garbled mark")
	}
}

// TestBadInputSendsNothing checks that every invalid argument is an
// ErrInvalidArgument and reaches no server.
func TestBadInputSendsNothing(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // nothing listens: any send would fail differently
	defer rdb.Close()
	ctx := ctxFor(t)
	s := newStore(t, rdb)
	noop := func(old string, ok bool) (string, error) { return old, nil }
	for name, err := range map[string]error{
		"Get negative token": func() error { _, _, err := s.Get(ctx, "k", -1); return err }(),
		"Set negative token": s.Set(ctx, "k", "v", -1),
		"Set token 0":        s.Set(ctx, "k", "v", 0),
		"Get token 0":        func() error { _, _, err := s.Get(ctx, "k", 0); return err }(),
		"Update token 0":     func() error { _, err := s.Update(ctx, "k", 0, noop); return err }(),
		"Get empty key":      func() error { _, _, err := s.Get(ctx, "", 1); return err }(),
		"Set brace key":      s.Set(ctx, "a}b", "v", 1),
		"Update nil fn":      func() error { _, err := s.Update(ctx, "k", 1, nil); return err }(),
		"Update empty key":   func() error { _, err := s.Update(ctx, "", 1, noop); return err }(),
		"New nil client":     func() error { _, err := fence.New(nil); return err }(),
		"New typed nil":      func() error { _, err := fence.New((*redis.Client)(nil)); return err }(),
		"New negative TTL":   func() error { _, err := fence.New(rdb, fence.WithTTL(-time.Second)); return err }(),
		"New sub-ms TTL":     func() error { _, err := fence.New(rdb, fence.WithTTL(time.Microsecond)); return err }(),
		"New nil option":     func() error { _, err := fence.New(rdb, nil); return err }(),
	} {
		if !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

func TestScriptFlushIsTransparent(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv.Client(t))
	ctx := ctxFor(t)
	for i := int64(1); i <= 3; i++ {
		srv.FlushScripts(t)
		if err := s.Set(ctx, "{k}", "v", i); err != nil {
			t.Fatalf("Set after SCRIPT FLUSH: %v", err)
		}
		if _, _, err := s.Get(ctx, "{k}", i); err != nil {
			t.Fatalf("Get after SCRIPT FLUSH: %v", err)
		}
	}
}

func TestMarkKeySharesTheSlot(t *testing.T) {
	for _, key := range []string{"stock:42", "{stock:42}", "a{b}c", "a{b", "{", "é", "{a}}"} {
		mark, err := fence.MarkKey(key)
		if err != nil {
			t.Errorf("MarkKey(%q): %v", key, err)
			continue
		}
		if keyslot.Of(mark) != keyslot.Of(key) {
			t.Errorf("MarkKey(%q) = %q: slot %d, want %d", key, mark, keyslot.Of(mark), keyslot.Of(key))
		}
	}
	for _, key := range []string{"", "a}b", "}", "{}}", "{}x", "x{}"} {
		if _, err := fence.MarkKey(key); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("MarkKey(%q): %v, want ErrInvalidArgument", key, err)
		}
	}
}

func FuzzMarkKey(f *testing.F) {
	for _, s := range []string{"k", "{k}", "a}b", "{}", "x{y}z}", "{{}}", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		mark, err := fence.MarkKey(key)
		if err != nil {
			if !errors.Is(err, dlock.ErrInvalidArgument) {
				t.Fatalf("MarkKey(%q): %v, want ErrInvalidArgument", key, err)
			}
			return
		}
		if mark == key || keyslot.Of(mark) != keyslot.Of(key) {
			t.Fatalf("MarkKey(%q) = %q: slot %d, want %d", key, mark, keyslot.Of(mark), keyslot.Of(key))
		}
	})
}
