package bench

import (
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
)

// TightRetry is the retry interval of the peers' tight variants: the
// interval that gave them the most acquisitions per second in the contended
// scenario on this machine (see docs/benchmarks.md).
const TightRetry = time.Millisecond

// Module paths whose versions the report lists.
const (
	modDlock     = "github.com/dlock-go/dlock"
	modGoredis   = "github.com/redis/go-redis/v9"
	modRedsync   = "github.com/go-redsync/redsync/v4"
	modRedislock = "github.com/bsm/redislock"
	modRueidis   = "github.com/redis/rueidis"
)

// semaphoreOfN is the size of dlock-semaphore-1of8's semaphore.
const semaphoreOfN = 8

// redlockTargets are added by files that need an API not every dlock
// version has (dlock_redlock.go).
var redlockTargets []Target

// Targets returns every library and variant the scenarios run, floor first.
func Targets() []Target {
	return append([]Target{
		{
			Name: "floor", Module: modGoredis, Kind: KindFloor, Single: true,
			Settings: fmt.Sprintf("go-redis SET NX PX, EVALSHA compare-and-delete; waits by retrying every %v", FloorSpin),
			New:      newFloor,
		},
		{
			Name: "dlock", Module: modDlock, Kind: KindDlock, Renews: true, RenewEvery: 1.0 / 3, Single: true,
			Settings: "defaults: TTL 30 s, auto-renew, pub/sub hand-off",
			New:      newDlock(),
		},
		{
			Name: "dlock-norenew", Module: modDlock, Kind: KindDlock, Single: true,
			Settings: "defaults but WithAutoRenew(false), as the peers do not renew",
			New:      newDlock(dlock.WithAutoRenew(false)),
		},
		{
			Name: "dlock-fair", Module: modDlock, Kind: KindDlock, Renews: true, RenewEvery: 1.0 / 3, Single: true, Primitive: true,
			Settings: "c.FairMutex(key).Lock with the defaults: every waiting goroutine queues in Redis, granted in arrival order",
			New:      newDlockTaking(takeFair),
		},
		{
			Name: "dlock-reentrant", Module: modDlock, Kind: KindDlock, Renews: true, RenewEvery: 1.0 / 3, Single: true, Primitive: true,
			Settings: "c.ReentrantMutex(key).Lock with the defaults; each Lock call carries a fresh owner (WithOwner), so every goroutine is an owner of its own",
			New:      newDlockTaking(takeReentrant),
		},
		{
			Name: "dlock-rwmutex", Module: modDlock, Kind: KindDlock, Renews: true, RenewEvery: 1.0 / 3, Single: true, Primitive: true,
			Settings: "c.RWMutex(key).Lock, the write lock, with the defaults (readers share, so RLock is not measured)",
			New:      newDlockTaking(takeRWMutex),
		},
		{
			Name: "dlock-semaphore", Module: modDlock, Kind: KindDlock, Renews: true, RenewEvery: 1.0 / 3, Single: true, Primitive: true,
			Settings: "c.Semaphore(key, 1).Acquire(ctx, 1) with the defaults: the one permit of one, so it excludes as a mutex does; Release",
			New:      newDlockTaking(takeSemaphoreOf(1)),
		},
		{
			Name: perCall, Module: modDlock, Kind: KindDlock, Renews: true, RenewEvery: 1.0 / 3, Single: true, Primitive: true,
			Settings: "c.Mutex(key, dlock.WithTTL(30*time.Second)).Lock: the Mutex with its options given per call (the default TTL, so the settings are dlock's), as the README shows",
			New:      newDlockTaking(takeMutexPerCall),
		},
		{
			Name: "dlock-rwmutex-read", Module: modDlock, Kind: KindDlock, Renews: true, RenewEvery: 1.0 / 3, Single: true, Primitive: true, Shares: true,
			Settings: "c.RWMutex(key).RLock with the defaults, the read lock: readers share it, so it runs in scenario 1 only",
			New:      newDlockTaking(takeRWMutexRead),
		},
		{
			Name: "dlock-semaphore-1of8", Module: modDlock, Kind: KindDlock, Renews: true, RenewEvery: 1.0 / 3, Single: true, Primitive: true, Shares: true,
			Settings: fmt.Sprintf("c.Semaphore(key, %d).Acquire(ctx, 1) with the defaults: one permit of several, so it runs in scenario 1 only; Release", semaphoreOfN),
			New:      newDlockTaking(takeSemaphoreOf(semaphoreOfN)),
		},
		{
			Name: "dlock-multilock", Module: modDlock, Kind: KindDlock, Renews: true, RenewEvery: 1.0 / 3, Single: true, Primitive: true,
			Settings: "c.MultiLock(key+\"/1\", key+\"/2\").Lock with the defaults: two names, each in a hash slot of its own",
			New:      newDlockTaking(takeMultiLock),
		},
		{
			Name: "redsync", Module: modRedsync, Kind: KindPeer, Single: true, Multi: true,
			Settings: "defaults: expiry 8 s, 32 tries 50–250 ms apart (Lock is called again when they run out)",
			New:      newRedsync(0),
		},
		{
			Name: "redsync-tight", Module: modRedsync, Kind: KindPeer, Tuned: true, Single: true, Multi: true,
			Settings: fmt.Sprintf("WithRetryDelay(%v), WithTries(MaxInt32)", TightRetry),
			New:      newRedsync(TightRetry),
		},
		{
			Name: "redislock", Module: modRedislock, Kind: KindPeer, Single: true,
			Settings: fmt.Sprintf("TTL 30 s, LinearBackoff(%v) (its default is no retry; this is its README's interval)", RedislockDefaultBackoff),
			New:      newRedislock(RedislockDefaultBackoff),
		},
		{
			Name: "redislock-tight", Module: modRedislock, Kind: KindPeer, Tuned: true, Single: true,
			Settings: fmt.Sprintf("TTL 30 s, LinearBackoff(%v)", TightRetry),
			New:      newRedislock(TightRetry),
		},
		{
			Name: "rueidislock", Module: modRueidis, Kind: KindPeer, Renews: true, RenewEvery: 1.0 / 2, Single: true,
			Settings: "defaults: KeyMajority 2 (3 keys), validity 5 s renewed every 2.5 s, client-side-caching wake-ups",
			New:      newRueidislock,
		},
	}, redlockTargets...)
}

// DeadlineVariantOf is the target that BenchmarkUncontended also runs with
// a deadline on Lock's context, as DeadlineVariantOf+DeadlineSuffix: dlock,
// which honours a deadline that its go-redis client would not enforce
// (without ContextTimeoutEnabled, the default) by handing each call to
// another goroutine, so as to return at the deadline whatever the server
// does. The peers and the floor ignore such a deadline, so it costs them
// nothing.
const (
	DeadlineVariantOf = "dlock"
	DeadlineSuffix    = "-deadline"
)

// TargetByName returns the target called name from Targets.
func TargetByName(name string) (Target, bool) {
	for _, t := range Targets() {
		if t.Name == name {
			return t, true
		}
	}
	return Target{}, false
}
