package bench

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// redsyncLocker drives go-redsync/redsync v4 over go-redis v9 pools: one pool
// per node (several for Redlock), a new redsync.Mutex per acquisition as its
// documentation shows.
type redsyncLocker struct {
	clients []*redis.Client
	rs      *redsync.Redsync
	opts    []redsync.Option
}

// newRedsync returns a constructor with redsync's default options when
// retryDelay is zero (8 s expiry, 32 tries, a random 50–250 ms between
// them), or else a fixed retryDelay and unlimited tries.
func newRedsync(retryDelay time.Duration) func(Config) (Locker, error) {
	return func(cfg Config) (Locker, error) {
		l := &redsyncLocker{}
		pools := make([]redsyncredis.Pool, len(cfg.Addrs))
		for i, addr := range cfg.Addrs {
			rdb := newGoredis(addr, cfg.Counter)
			l.clients = append(l.clients, rdb)
			pools[i] = goredis.NewPool(rdb)
		}
		l.rs = redsync.New(pools...)
		if cfg.TTL > 0 {
			l.opts = append(l.opts, redsync.WithExpiry(cfg.TTL))
		}
		if retryDelay > 0 {
			l.opts = append(l.opts, redsync.WithRetryDelay(retryDelay), redsync.WithTries(math.MaxInt32))
		}
		return l, nil
	}
}

// redsyncGaveUp reports whether err only says the lock was taken by others
// (when the tries ran out, or on TryLock).
func redsyncGaveUp(err error) bool {
	var taken *redsync.ErrTaken
	var nodeTaken *redsync.ErrNodeTaken
	return errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) || errors.As(err, &nodeTaken)
}

func (l *redsyncLocker) unlock(m *redsync.Mutex) Unlock {
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: lock not held at release")
		}
		return err
	}
}

func (l *redsyncLocker) Lock(ctx context.Context, key string) (Unlock, error) {
	return waitLoop(ctx, func(ctx context.Context) (Unlock, bool, error) {
		m := l.rs.NewMutex(key, l.opts...)
		if err := m.LockContext(ctx); err != nil {
			return nil, redsyncGaveUp(err), err
		}
		return l.unlock(m), false, nil
	})
}

func (l *redsyncLocker) TryLock(ctx context.Context, key string) (Unlock, error) {
	m := l.rs.NewMutex(key, l.opts...)
	if err := m.TryLockContext(ctx); err != nil {
		if redsyncGaveUp(err) {
			return nil, errors.Join(ErrBusy, err)
		}
		return nil, err
	}
	return l.unlock(m), nil
}

func (l *redsyncLocker) Close() error {
	var errs []error
	for _, c := range l.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
