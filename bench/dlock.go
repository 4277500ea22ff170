package bench

import (
	"context"
	"errors"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// dlockLocker drives dlock through its public API: one Client per Locker,
// c.Mutex(key).Lock / TryLock, lease.Unlock.
type dlockLocker struct {
	rdb *redis.Client
	c   *dlock.Client
}

func newDlock(opts ...dlock.Option) func(Config) (Locker, error) {
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
		return &dlockLocker{rdb: rdb, c: c}, nil
	}
}

func (d *dlockLocker) Lock(ctx context.Context, key string) (Unlock, error) {
	l, err := d.c.Mutex(key).Lock(ctx)
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

func (d *dlockLocker) TryLock(ctx context.Context, key string) (Unlock, error) {
	l, err := d.c.Mutex(key).TryLock(ctx)
	if errors.Is(err, dlock.ErrNotObtained) {
		return nil, errors.Join(ErrBusy, err)
	}
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

func (d *dlockLocker) Close() error {
	return errors.Join(d.c.Close(), d.rdb.Close())
}
