package bench

import (
	"context"
	"errors"
	"time"
)

// ErrBusy is what TryLock returns when another owner holds the key, whatever
// the library's own error for it.
var ErrBusy = errors.New("bench: lock is held by another owner")

// Unlock releases a lock that Locker.Lock or Locker.TryLock returned.
type Unlock func(ctx context.Context) error

// Locker is one library's lock client, as one process would hold it: its own
// Redis connection pool and whatever background machinery the library has.
// It is safe for concurrent use.
type Locker interface {
	// Lock waits until it holds key or ctx ends. When ctx ends first it
	// returns an error that wraps ctx.Err().
	Lock(ctx context.Context, key string) (Unlock, error)
	// TryLock makes one attempt and returns ErrBusy when key is held.
	TryLock(ctx context.Context, key string) (Unlock, error)
	// Close releases the client's connections and goroutines.
	Close() error
}

// Config is what a Target needs to build a Locker.
type Config struct {
	// Addrs are the redis-server addresses: one for a single-node library,
	// several independent masters for Redlock.
	Addrs []string
	// Counter, when set, counts the commands and round trips the client
	// sends (a go-redis hook, or a wrapper around the rueidis client).
	Counter *Counter
	// TTL overrides the lock's TTL (or rueidislock's key validity); zero
	// keeps the library's default, or DefaultTTL where it has none.
	TTL time.Duration
}

// DefaultTTL is the TTL given to libraries that have no default (the floor
// and redislock): dlock's default.
const DefaultTTL = 30 * time.Second

func (c Config) ttl(def time.Duration) time.Duration {
	if c.TTL > 0 {
		return c.TTL
	}
	return def
}

// Kind says what a Target is, for ratios in the report.
type Kind int

const (
	// KindDlock is dlock itself (any variant).
	KindDlock Kind = iota
	// KindFloor is the raw go-redis floor.
	KindFloor
	// KindPeer is another library.
	KindPeer
)

// Target is one library with one set of options.
type Target struct {
	// Name labels the target in tables and charts, e.g. "redsync-tight".
	Name string
	// Module is the module path whose version the report shows.
	Module string
	// Settings describes the options in use, for the report.
	Settings string
	Kind     Kind
	// Tuned marks a peer's tight-retry variant. Retry settings only matter
	// when the lock is taken, so tuned variants run only in the contended
	// and waiting scenarios.
	Tuned bool
	// Renews marks libraries that renew held locks by themselves; only they
	// run the watchdog scenario. RenewEvery is their renewal period as a
	// fraction of the TTL.
	Renews     bool
	RenewEvery float64
	// Single and Multi say where the target runs: on one redis-server
	// (scenarios 1 to 4), over several independent ones (Redlock, scenario
	// 5), or both.
	Single, Multi bool
	// Primitive marks dlock's primitives other than the Mutex (FairMutex,
	// ReentrantMutex, RWMutex, Semaphore). They run in scenarios 1 to 3
	// only, and the report shows them in a section of their own, against
	// the Mutex, apart from the tables and verdicts that compare libraries.
	Primitive bool
	// Shares marks a Primitive that does not exclude: an RWMutex's read
	// lock, one permit of several. Only scenario 1 measures it (scenarios
	// 2 and 3 need a lock that keeps others waiting), and its TryLock
	// succeeds beside a holder.
	Shares bool
	// New builds a Locker.
	New func(Config) (Locker, error)
}

// waitLoop turns a library's bounded wait into one that lasts as long as ctx:
// redsync gives up after its retry count and redislock at its own deadline,
// and a caller that must have the lock calls again, as this does. try reports
// gaveUp when the library ended its wait without an error of its own.
func waitLoop(ctx context.Context, try func(ctx context.Context) (u Unlock, gaveUp bool, err error)) (Unlock, error) {
	for {
		u, gaveUp, err := try(ctx)
		if err == nil && !gaveUp {
			return u, nil
		}
		if ctx.Err() != nil {
			return nil, errors.Join(ctx.Err(), err)
		}
		if !gaveUp {
			return nil, err
		}
	}
}
