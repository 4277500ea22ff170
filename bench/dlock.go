package bench

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// dlockLocker drives one of dlock's primitives through its public API: one
// Client per Locker, take for Lock and TryLock (c.Mutex(key).Lock /
// TryLock for the Mutex), and the lease's Unlock or the permits' Release.
type dlockLocker struct {
	rdb  *redis.Client
	c    *dlock.Client
	take takeFunc
}

// takeFunc takes key on c with one primitive: waiting (Lock, Acquire) when
// wait is set, in one attempt (TryLock, TryAcquire) otherwise. Its errors
// are the primitive's own.
type takeFunc func(ctx context.Context, c *dlock.Client, key string, wait bool) (Unlock, error)

func newDlock(opts ...dlock.Option) func(Config) (Locker, error) {
	return newDlockTaking(takeMutex, opts...)
}

// newDlockTaking builds Lockers that take their keys with take.
func newDlockTaking(take takeFunc, opts ...dlock.Option) func(Config) (Locker, error) {
	return func(cfg Config) (Locker, error) {
		rdb := newGoredis(cfg.Addrs[0], cfg.Counter)
		o := opts
		if cfg.TTL > 0 {
			o = append(append([]dlock.Option(nil), opts...), dlock.WithTTL(cfg.TTL))
		}
		c, err := dlock.New(rdb, o...)
		if err != nil {
			_ = rdb.Close()
			return nil, err
		}
		return &dlockLocker{rdb: rdb, c: c, take: take}, nil
	}
}

func (d *dlockLocker) Lock(ctx context.Context, key string) (Unlock, error) {
	return d.take(ctx, d.c, key, true)
}

func (d *dlockLocker) TryLock(ctx context.Context, key string) (Unlock, error) {
	u, err := d.take(ctx, d.c, key, false)
	if errors.Is(err, dlock.ErrNotObtained) {
		return nil, errors.Join(ErrBusy, err)
	}
	return u, err
}

func (d *dlockLocker) Close() error {
	return errors.Join(d.c.Close(), d.rdb.Close())
}

// leaseUnlock returns l's Unlock, or err.
func leaseUnlock(l *dlock.Lease, err error) (Unlock, error) {
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

func takeMutex(ctx context.Context, c *dlock.Client, key string, wait bool) (Unlock, error) {
	m := c.Mutex(key)
	if wait {
		return leaseUnlock(m.Lock(ctx))
	}
	return leaseUnlock(m.TryLock(ctx))
}

func takeFair(ctx context.Context, c *dlock.Client, key string, wait bool) (Unlock, error) {
	m := c.FairMutex(key)
	if wait {
		return leaseUnlock(m.Lock(ctx))
	}
	return leaseUnlock(m.TryLock(ctx))
}

// takeRWMutex takes the write lock (takeRWMutexRead the read lock).
func takeRWMutex(ctx context.Context, c *dlock.Client, key string, wait bool) (Unlock, error) {
	rw := c.RWMutex(key)
	if wait {
		return leaseUnlock(rw.Lock(ctx))
	}
	return leaseUnlock(rw.TryLock(ctx))
}

// takeSemaphoreOf acquires one permit of a semaphore of permits: of one,
// it excludes as a mutex does; of several (the common use, a limit on
// concurrent calls), it does not.
func takeSemaphoreOf(permits int) takeFunc {
	return func(ctx context.Context, c *dlock.Client, key string, wait bool) (Unlock, error) {
		s := c.Semaphore(key, permits)
		var (
			p   *dlock.Permits
			err error
		)
		if wait {
			p, err = s.Acquire(ctx, 1)
		} else {
			p, err = s.TryAcquire(ctx, 1)
		}
		if err != nil {
			return nil, err
		}
		return p.Release, nil
	}
}

// ownerSeq numbers the owner identities of takeReentrant.
var ownerSeq atomic.Uint64

// takeReentrant gives every call a fresh owner identity (WithOwner), so no
// two calls, and no two goroutines, share an owner: each waits for the
// other, as with a Mutex, instead of adding a hold.
func takeReentrant(ctx context.Context, c *dlock.Client, key string, wait bool) (Unlock, error) {
	ctx = dlock.WithOwner(ctx, "bench-"+strconv.FormatUint(ownerSeq.Add(1), 10))
	m := c.ReentrantMutex(key)
	if wait {
		return leaseUnlock(m.Lock(ctx))
	}
	return leaseUnlock(m.TryLock(ctx))
}

// takeMutexPerCall is takeMutex with an option given to c.Mutex, as the
// README shows, rather than to New: the default TTL, so that it measures
// what options given per call cost against the same settings on the Client.
func takeMutexPerCall(ctx context.Context, c *dlock.Client, key string, wait bool) (Unlock, error) {
	m := c.Mutex(key, dlock.WithTTL(30*time.Second))
	if wait {
		return leaseUnlock(m.Lock(ctx))
	}
	return leaseUnlock(m.TryLock(ctx))
}

// takeRWMutexRead takes the read lock, which readers share.
func takeRWMutexRead(ctx context.Context, c *dlock.Client, key string, wait bool) (Unlock, error) {
	rw := c.RWMutex(key)
	if wait {
		return leaseUnlock(rw.RLock(ctx))
	}
	return leaseUnlock(rw.TryRLock(ctx))
}

// takeMultiLock takes two names derived from key, whose hash tags differ,
// so that each is in a hash slot of its own (as on a Cluster they would
// be on different nodes).
func takeMultiLock(ctx context.Context, c *dlock.Client, key string, wait bool) (Unlock, error) {
	m := c.MultiLock(key+"/1", key+"/2")
	if wait {
		return leaseUnlock(m.Lock(ctx))
	}
	return leaseUnlock(m.TryLock(ctx))
}
