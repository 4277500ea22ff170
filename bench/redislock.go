package bench

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

// RedislockDefaultBackoff is the retry interval of the "redislock" target.
// redislock's own default is not to retry at all, so a waiting Lock has to
// choose one; this is the interval its README example uses.
const RedislockDefaultBackoff = 100 * time.Millisecond

// redislockLocker drives bsm/redislock: Obtain with a linear backoff,
// Release.
type redislockLocker struct {
	rdb     *redis.Client
	c       *redislock.Client
	ttl     time.Duration
	backoff time.Duration
}

func newRedislock(backoff time.Duration) func(Config) (Locker, error) {
	return func(cfg Config) (Locker, error) {
		rdb := newGoredis(cfg.Addrs[0], cfg.Counter)
		return &redislockLocker{rdb: rdb, c: redislock.New(rdb), ttl: cfg.ttl(DefaultTTL), backoff: backoff}, nil
	}
}

func redislockRelease(l *redislock.Lock) Unlock { return l.Release }

func (l *redislockLocker) Lock(ctx context.Context, key string) (Unlock, error) {
	return waitLoop(ctx, func(ctx context.Context) (Unlock, bool, error) {
		// A fresh strategy per call: redislock's strategies are stateless
		// here, but LimitRetry and ExponentialBackoff are not.
		lk, err := l.c.Obtain(ctx, key, l.ttl, &redislock.Options{RetryStrategy: redislock.LinearBackoff(l.backoff)})
		if err != nil {
			// Obtain gives up at its own deadline (the TTL) when ctx has
			// none, with ErrNotObtained or that deadline's error.
			gaveUp := errors.Is(err, redislock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded)
			return nil, gaveUp, err
		}
		return redislockRelease(lk), false, nil
	})
}

func (l *redislockLocker) TryLock(ctx context.Context, key string) (Unlock, error) {
	lk, err := l.c.Obtain(ctx, key, l.ttl, nil) // nil: no retry, redislock's default
	if errors.Is(err, redislock.ErrNotObtained) {
		return nil, errors.Join(ErrBusy, err)
	}
	if err != nil {
		return nil, err
	}
	return redislockRelease(lk), nil
}

func (l *redislockLocker) Close() error { return l.rdb.Close() }
