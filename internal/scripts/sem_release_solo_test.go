package scripts

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// sem_release.lua: the solo holder's own release with others queued (a
// contended semaphore's hand-off through Redis) deletes the holder and
// grants the head, alone, in the solo form; with a foreign waiters key the
// release stands, the reply says the key is foreign, and the key is left as
// it is.
func TestSemReleaseOwnSoloWithWaiters(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for _, foreign := range []bool{false, true} {
		p := fmt.Sprintf("s%v", foreign)
		keys := []string{p, p + ":n", p + ":l", p + ":f", p + ":q", p + ":w"}
		rdb.Set(ctx, keys[0], "me 1 5", time.Minute)
		rdb.Set(ctx, keys[3], "5", time.Hour)
		queueWaiter(ctx, t, rdb, keys[4], keys[5], "next", 1, "1")
		if foreign {
			rdb.Del(ctx, keys[5])
			rdb.Set(ctx, keys[5], "not a semaphore's", time.Minute)
		}
		v, err := rdb.Eval(ctx, SemRelease.Source(), keys, "me", "1 60000 30000 5000 3600000 PUBLISH").Result()
		if rdb.Get(ctx, keys[0]).Val() == "me 1 5" {
			t.Errorf("foreign %v: the holder was not released", foreign)
		}
		if foreign {
			if err == nil || !strings.Contains(err.Error(), "DLOCK_CONFLICT the lock was released, but ") {
				t.Errorf("a foreign waiters key: %v, %v; want the lock released, but a conflict", v, err)
			}
			if got := rdb.Get(ctx, keys[5]).Val(); got != "not a semaphore's" {
				t.Errorf("the foreign waiters key became %q", got)
			}
			continue
		}
		a, ok := v.([]any)
		if err != nil || !ok || len(a) != 4 || a[0] != int64(1) || a[3] != "next" {
			t.Fatalf("the release: %v, %v; want {1, fence, px, next}", v, err)
		}
		wantString(ctx, t, rdb, keys[0], "next 1 "+strconv.FormatInt(a[1].(int64), 10), "the head granted alone")
		if n := rdb.ZCard(ctx, keys[4]).Val(); n != 0 {
			t.Errorf("%d still queued, want none", n)
		}
	}
}
