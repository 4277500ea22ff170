package dlock_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestForeignNumericFenceIsAConflict: a fencing key holding a string that
// INCR refuses although it looks like a number (a leading zero, more than an
// int64 holds, the largest int64, which INCR would overflow, "-0", or what
// Lua's tonumber reads: "1.5", "1e3") is foreign: ErrKeyConflict, and no
// lock is taken or left behind. Since 0db86cf the digit strings passed for
// counters that the server had refused, and their INCR's "not an integer"
// reply came back instead of ErrKeyConflict; and the checks that RWMutex
// and MultiLock make before their writes used tonumber, so with any of these
// values the RWMutex left its hold in the holders zset, and the MultiLock the
// locks it had set before the one whose INCR raised, for their TTL.
func TestForeignNumericFenceIsAConflict(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := newClient(t, srv)
	ctx := testCtx(t)
	values := []string{"007", "99999999999999999999", "9223372036854775807", "-0", "1.5", "1e3"}
	type op struct {
		fence string // suffix of the fencing key
		locks []string
		call  func(name string) error
	}
	ops := map[string]op{
		"Mutex.TryLock": {":fence", []string{""}, func(n string) error {
			return second(c.Mutex(n).TryLock(ctx))
		}},
		"ReentrantMutex.TryLock": {":re:fence", []string{":re"}, func(n string) error {
			return second(c.ReentrantMutex(n).TryLock(dlock.WithOwner(ctx, "o")))
		}},
		"RWMutex.TryLock": {":rw:fence", []string{":rw"}, func(n string) error {
			return second(c.RWMutex(n).TryLock(ctx))
		}},
		"Semaphore.TryAcquire": {":sem:fence", []string{":sem"}, func(n string) error {
			_, err := c.Semaphore(n, 2).TryAcquire(ctx, 1)
			return err
		}},
		"MultiLock.TryLock": {":fence", []string{"", "0"}, func(n string) error {
			// "0"+n sorts before n: its lock is taken first.
			return second(c.MultiLock(n, "0"+n).TryLock(ctx))
		}},
	}
	trial := 0
	for what, o := range ops {
		for _, v := range values {
			trial++
			name := fmt.Sprintf("fence-numeric-%d", trial)
			rdb.Set(ctx, lockKey(name)+o.fence, v, time.Hour)
			err := o.call(name)
			if !errors.Is(err, dlock.ErrKeyConflict) {
				t.Errorf("%s with %q in the fencing key: %v, want ErrKeyConflict", what, v, err)
			}
			for _, s := range o.locks {
				k := lockKey(name) + s
				if s == "0" {
					k = lockKey("0" + name)
				}
				if n := rdb.Exists(ctx, k).Val(); n != 0 {
					t.Errorf("%s with %q in the fencing key: %s left behind (%s)", what, v, k, rdb.Type(ctx, k).Val())
				}
			}
			if got := rdb.Get(ctx, lockKey(name)+o.fence).Val(); got != v {
				t.Errorf("%s: the fencing key changed from %q to %q", what, v, got)
			}
		}
	}
}

func second[T any](_ T, err error) error { return err }
