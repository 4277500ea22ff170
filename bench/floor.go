package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// floorRelease is the compare-and-delete every TTL lock needs; go-redis's
// Script runs it with EVALSHA (EVAL once on NOSCRIPT).
var floorRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)

// FloorSpin is how long the floor's Lock sleeps between attempts.
const FloorSpin = time.Millisecond

// floor is the least a correct TTL lock can do with go-redis: SET key token
// NX PX to lock, the compare-and-delete script to unlock, and, when waiting,
// another SET NX every FloorSpin. No renewal, no queue, no notification.
type floor struct {
	rdb *redis.Client
	ttl time.Duration
}

func newFloor(cfg Config) (Locker, error) {
	return &floor{rdb: newGoredis(cfg.Addrs[0], cfg.Counter), ttl: cfg.ttl(DefaultTTL)}, nil
}

func (f *floor) TryLock(ctx context.Context, key string) (Unlock, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	token := hex.EncodeToString(b[:])
	ok, err := f.rdb.SetNX(ctx, key, token, f.ttl).Result()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrBusy
	}
	return func(ctx context.Context) error {
		n, err := floorRelease.Run(ctx, f.rdb, []string{key}, token).Int64()
		if err == nil && n != 1 {
			err = errors.New("floor: lock not held at release")
		}
		return err
	}, nil
}

func (f *floor) Lock(ctx context.Context, key string) (Unlock, error) {
	var t *time.Timer
	for {
		u, err := f.TryLock(ctx, key)
		if !errors.Is(err, ErrBusy) {
			return u, err
		}
		if t == nil {
			t = time.NewTimer(FloorSpin)
			defer t.Stop()
		} else {
			t.Reset(FloorSpin)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func (f *floor) Close() error { return f.rdb.Close() }
