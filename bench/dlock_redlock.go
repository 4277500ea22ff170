package bench

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

func init() {
	redlockTargets = append(redlockTargets, Target{
		Name: "dlock-redlock", Module: modDlock, Kind: KindDlock, Renews: true, RenewEvery: 1.0 / 3, Multi: true,
		Settings: "dlock.NewRedlock with defaults: TTL 30 s, auto-renew",
		New:      newDlockRedlock,
	})
}

// dlockRedlock drives dlock's Redlock through its public API: one
// dlock.Redlock over one go-redis client per node.
type dlockRedlock struct {
	clients []*redis.Client
	r       *dlock.Redlock
}

func newDlockRedlock(cfg Config) (Locker, error) {
	d := &dlockRedlock{}
	nodes := make([]dlock.RedisClient, len(cfg.Addrs))
	for i, addr := range cfg.Addrs {
		rdb := newGoredis(addr, cfg.Counter)
		d.clients = append(d.clients, rdb)
		nodes[i] = rdb
	}
	var opts []dlock.Option
	if cfg.TTL > 0 {
		opts = append(opts, dlock.WithTTL(cfg.TTL))
	}
	r, err := dlock.NewRedlock(nodes, opts...)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	d.r = r
	return d, nil
}

func (d *dlockRedlock) Lock(ctx context.Context, key string) (Unlock, error) {
	l, err := d.r.Mutex(key).Lock(ctx)
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

func (d *dlockRedlock) TryLock(ctx context.Context, key string) (Unlock, error) {
	l, err := d.r.Mutex(key).TryLock(ctx)
	if errors.Is(err, dlock.ErrNotObtained) {
		return nil, errors.Join(ErrBusy, err)
	}
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

func (d *dlockRedlock) Close() error {
	var errs []error
	if d.r != nil {
		errs = append(errs, d.r.Close())
	}
	for _, c := range d.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
