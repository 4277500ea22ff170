package bench

import (
	"context"
	"errors"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// rueidisLocker drives rueidis' rueidislock with its defaults: KeyMajority 2
// (three keys per lock, two needed), 5 s key validity renewed every 2.5 s,
// and waiters woken by client-side-caching invalidations. Its lock is a
// context; cancelling it releases the lock and returns once released.
type rueidisLocker struct {
	l rueidislock.Locker
}

func newRueidislock(cfg Config) (Locker, error) {
	opt := rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: cfg.Addrs[:1]},
		KeyValidity:  cfg.TTL, // zero keeps the default
	}
	if c := cfg.Counter; c != nil {
		opt.ClientBuilder = func(o rueidis.ClientOption) (rueidis.Client, error) {
			rc, err := rueidis.NewClient(o)
			if err != nil {
				return nil, err
			}
			return countingRueidis{Client: rc, c: c}, nil
		}
	}
	l, err := rueidislock.NewLocker(opt)
	if err != nil {
		return nil, err
	}
	return &rueidisLocker{l: l}, nil
}

func unlockCancel(cancel context.CancelFunc) Unlock {
	return func(context.Context) error {
		cancel() // releases the keys and waits until they are released
		return nil
	}
}

func (r *rueidisLocker) Lock(ctx context.Context, key string) (Unlock, error) {
	_, cancel, err := r.l.WithContext(ctx, key)
	if err != nil {
		return nil, err
	}
	return unlockCancel(cancel), nil
}

func (r *rueidisLocker) TryLock(ctx context.Context, key string) (Unlock, error) {
	_, cancel, err := r.l.TryWithContext(ctx, key)
	if errors.Is(err, rueidislock.ErrNotLocked) {
		return nil, errors.Join(ErrBusy, err)
	}
	if err != nil {
		return nil, err
	}
	return unlockCancel(cancel), nil
}

func (r *rueidisLocker) Close() error {
	r.l.Close()
	return nil
}
