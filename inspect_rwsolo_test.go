package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// rwInfo returns the RWMutex part of what Inspect reports for name.
func rwInfo(ctx context.Context, t *testing.T, c *dlock.Client, name string) dlock.LockInfo {
	t.Helper()
	infos, err := c.Inspect(ctx, name)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	for _, info := range infos {
		if info.Kind == dlock.KindRWMutex {
			return info
		}
	}
	t.Fatalf("Inspect: no RWMutex in %+v", infos)
	return dlock.LockInfo{}
}

// Inspect and List show a solo holder (rw_lib.lua) as they show a holder
// in the zset form: owner, mode, TTL, fencing token and, once the watchdog
// recorded it, how long it has held; ForceUnlock frees it.
func TestInspectRWMutexSoloHolder(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := newClient(t, srv, dlock.WithTTL(heldTTL), dlock.WithOwnerInfo("solo-writer"))
	ctx := testCtx(t)
	name := t.Name()
	w, err := c.RWMutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantSolo(ctx, t, srv, name, "W", w)
	var h dlock.Holder
	waitFor(t, 20*time.Second, func() bool {
		info := rwInfo(ctx, t, c, name)
		if len(info.Holders) != 1 {
			t.Fatalf("holders = %+v, want the solo writer", info.Holders)
		}
		h = info.Holders[0]
		return h.HeldFor > 0
	}, "the watchdog to record the hold's start")
	if h.Owner != w.Owner() || h.Info != "solo-writer" || h.Mode != dlock.ModeWrite {
		t.Errorf("holder %+v, want owner %s, info solo-writer, mode %s", h, w.Owner(), dlock.ModeWrite)
	}
	if h.Token != w.Token() {
		t.Errorf("holder's token %d, want the lease's %d", h.Token, w.Token())
	}
	if h.TTL <= 0 || h.TTL > heldTTL {
		t.Errorf("holder's TTL %v, want in (0, %v]", h.TTL, heldTTL)
	}
	wantSolo(ctx, t, srv, name, "W", w) // inspecting writes nothing

	list, err := c.List(ctx, name)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	found := false
	for _, info := range list {
		if info.Kind == dlock.KindRWMutex && len(info.Holders) == 1 {
			found = info.Holders[0].Owner == w.Owner() && info.Holders[0].Token == w.Token() && info.Holders[0].Mode == dlock.ModeWrite
		}
	}
	if !found {
		t.Errorf("List = %+v, want the solo writer with its token", list)
	}

	if n, err := c.ForceUnlock(ctx, name); err != nil || n != 1 {
		t.Fatalf("ForceUnlock = %d, %v; want the solo writer released", n, err)
	}
	if n := srv.Client(t).Exists(ctx, rwKeys(name)...).Val(); n != 0 {
		t.Errorf("%d keys left after ForceUnlock", n)
	}
	waitDone(t, w, 20*time.Second)
	if err := w.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("the force-released lease's Err = %v, want ErrLockLost", err)
	}
}

// A string under the holders key that no rw script wrote (no expiry, or a
// value that is not a member) is reported as a conflict by every
// operation, and left as it is.
func TestRWMutexForeignStringHolders(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	for what, set := range map[string]func(key string) error{
		"a member without expiry": func(k string) error { return rdb.Set(ctx, k, "Wsomeone", 0).Err() },
		"not a member":            func(k string) error { return rdb.Set(ctx, k, "x-someone", time.Hour).Err() },
	} {
		t.Run(what, func(t *testing.T) {
			name := uniqueName(t)
			key := rwKey(name)
			if err := set(key); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rdb.Del(context.Background(), key) })
			dump := rdb.Dump(ctx, key).Val()
			rw := c.RWMutex(name)
			short := func() context.Context {
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				t.Cleanup(cancel)
				return ctx
			}
			for op, try := range map[string]func() (*dlock.Lease, error){
				"TryLock":  func() (*dlock.Lease, error) { return rw.TryLock(ctx) },
				"TryRLock": func() (*dlock.Lease, error) { return rw.TryRLock(ctx) },
				"Lock":     func() (*dlock.Lease, error) { return rw.Lock(short()) },
				"RLock":    func() (*dlock.Lease, error) { return rw.RLock(short()) },
			} {
				if _, err := try(); !errors.Is(err, dlock.ErrKeyConflict) {
					t.Errorf("%s: got %v, want ErrKeyConflict", op, err)
				}
			}
			if _, err := c.Inspect(ctx, name); !errors.Is(err, dlock.ErrKeyConflict) {
				t.Errorf("Inspect: %v, want ErrKeyConflict", err)
			}
			if _, err := c.ForceUnlock(ctx, name); !errors.Is(err, dlock.ErrKeyConflict) {
				t.Errorf("ForceUnlock: %v, want ErrKeyConflict", err)
			}
			if rdb.Dump(ctx, key).Val() != dump {
				t.Errorf("the foreign string was modified")
			}
			if d := rdb.PTTL(ctx, key).Val(); (d == -1) != (what == "a member without expiry") {
				t.Errorf("the foreign string's expiry changed: PTTL %v", d)
			}
			if n := rdb.Exists(ctx, key+":q", key+":w", key+":tok").Val(); n != 0 {
				t.Errorf("%d keys written beside the foreign string", n)
			}
		})
	}
}
