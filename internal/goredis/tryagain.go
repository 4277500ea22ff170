package goredis

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/driverkit"
)

// retryTryAgain sends again the calls a Cluster refused with TRYAGAIN. A
// node answers TRYAGAIN to a command with several keys in a slot being
// migrated when one of its keys is not on the node: the source when it has
// some of them (it redirects with ASK when it has none), and the target,
// after ASKING, unless it has them all. Missing keys count even when they exist
// nowhere, and dlock's scripts always name some (a Mutex's queue keys, a
// semaphore's limit): so a migration of a lock's slot refuses its scripts
// until it ends (SETSLOT NODE), however few keys it moves, not only while
// the keys are split for a moment. Redis refuses before it runs anything,
// so sending again is safe: the calls are sent again, after pauses growing
// from 5 ms to 200 ms (tryAgainPacer), until the migration ends or ctx
// does (or tryAgainLimit passes, for a context that can never end). go-redis
// gives up after a few quick tries. Calls that still meet TRYAGAIN then keep
// the error (transient: the caller may try again).
func (d *Driver) retryTryAgain(ctx context.Context, calls []*driver.Call, leave bool) {
	var pacer tryAgainPacer
	for {
		var again []*driver.Call
		for _, c := range calls {
			// Calls with WAIT went through runOnMasters, which retries
			// TRYAGAIN itself.
			if c.Replicas <= 0 && refusedInMigration(c.Err) {
				again = append(again, c)
			}
		}
		if len(again) == 0 {
			return
		}
		if !pacer.pause(ctx) {
			return
		}
		// A sending refused with TRYAGAIN did not run, but go-redis may
		// have written it before (its own retries): keep what that says.
		resent := make([]bool, len(again))
		for i, c := range again {
			resent[i] = c.Resent
		}
		d.kit.Dispatch(ctx, again, leave)
		for i, c := range again {
			c.Resent = c.Resent || resent[i]
		}
	}
}

func isTryAgain(err error) bool {
	var rerr *driver.ReplyError
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Msg, "TRYAGAIN")
}

// refusedInMigration reports a refusal that ran nothing and that a slot
// migration explains: TRYAGAIN, or a redirection (MOVED, ASK) that go-redis
// left to the caller because the TRYAGAINs before it used up its budget of
// redirections per command (MaxRedirects counts both). A call refused with
// MOVED once the migration ended must go on to the slot's new master, not
// fail (TestClusterMigrationBlocksUntilItEnds met that once).
func refusedInMigration(err error) bool {
	if err == nil {
		return false // before rerr, which errors.As moves to the heap
	}
	var rerr *driver.ReplyError
	return errors.As(err, &rerr) && (strings.HasPrefix(rerr.Msg, "TRYAGAIN") ||
		strings.HasPrefix(rerr.Msg, "MOVED ") || strings.HasPrefix(rerr.Msg, "ASK "))
}

// tryAgainLimit bounds the retries of TRYAGAIN for a context that can
// never end (context.Background()): nothing else would end them while a
// migration stalls.
const tryAgainLimit = 10 * time.Second

// tryAgainPacer paces the rounds of sending again calls refused with
// TRYAGAIN (retryTryAgain, runOnMasters): 5 ms, doubling to at most
// 200 ms.
type tryAgainPacer struct {
	backoff  driverkit.Backoff // zero until the first pause
	deadline time.Time         // set at the first pause: tryAgainLimit on for a context that can never end, else zero (none)
}

// pause waits before the next round; false, at once, when ctx has ended or
// the pause would end past the deadline: the calls keep their error.
func (p *tryAgainPacer) pause(ctx context.Context) bool {
	if p.backoff.First == 0 {
		p.backoff = driverkit.Backoff{First: 5 * time.Millisecond, Most: 200 * time.Millisecond}
		if ctx.Done() == nil {
			p.deadline = time.Now().Add(tryAgainLimit)
		}
	}
	pause := p.backoff.Next()
	if ctx.Err() != nil || !p.deadline.IsZero() && time.Now().Add(pause).After(p.deadline) {
		return false
	}
	return driverkit.Sleep(ctx, pause)
}
