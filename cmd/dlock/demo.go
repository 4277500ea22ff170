package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/dlock-go/dlock"
)

// demoOptions are the flags of "dlock demo".
type demoOptions struct {
	items   int
	workers int
	work    time.Duration
	ttl     time.Duration // 0: the library's default
	timeout time.Duration
}

// maxDemoWorkers bounds --workers: each worker opens its own connections,
// as a separate process would.
const maxDemoWorkers = 1000

func (a *app) demoCmd() *cobra.Command {
	o := &demoOptions{items: 200, workers: 16, work: time.Millisecond, timeout: 2 * time.Minute}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show workers overselling a stock without a lock, and dlock preventing it",
		Long: `demo runs the classic oversell race twice and compares the runs.

A stock of --items items is an integer in Redis. --workers concurrent workers,
each with its own Redis connection and its own dlock client (as separate
processes would have), sell it: read the stock, and if it is positive do a
little work (--work), write the stock minus one and count a sale.

The first run takes no lock: workers read the same stock before any of them
writes it back, so they sell more items than there are. The second run does
each sale while holding a dlock Mutex, so every item is sold exactly once;
it also reports how long workers waited for the lock and the fencing tokens
they were given, which must increase with every grant.

Without --redis or REDIS_URL the demo starts an embedded in-process Redis
(miniredis). Its keys (<prefix>demo:<random id>:..., where <prefix> is
--key-prefix, "dlock:" by default) are deleted at the end.

Exit status: 0 when the locked run sold every item exactly once, 1 when it
did not, Redis failed or --timeout expired, 2 for invalid flags, 128+S when
signal S interrupts it (130 for Ctrl-C, 143 for SIGTERM). The unlocked run
overselling is the expected outcome, not a failure.`,
		Example: `  dlock demo
  dlock demo --items 1000 --workers 32 --work 500us
  dlock demo --redis redis://127.0.0.1:6379`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.demo(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.items, "items", o.items, "number of items in stock")
	f.IntVar(&o.workers, "workers", o.workers,
		fmt.Sprintf("number of concurrent workers selling them, each with its own connections (1-%d)", maxDemoWorkers))
	f.DurationVar(&o.work, "work", o.work,
		"simulated work between reading and writing the stock, which widens the race window (0 for none)")
	f.DurationVar(&o.ttl, "ttl", o.ttl,
		fmt.Sprintf("lock TTL, between %v and %v; 0 keeps the library's default (see dlock.WithTTL)", dlock.MinTTL, dlock.MaxTTL))
	f.DurationVar(&o.timeout, "timeout", o.timeout, "time limit for the whole demo")
	return cmd
}

func (o *demoOptions) validate() error {
	switch {
	case o.items < 1:
		return usageErrorf("--items must be at least 1, got %d", o.items)
	case o.workers < 1 || o.workers > maxDemoWorkers:
		return usageErrorf("--workers must be between 1 and %d, got %d", maxDemoWorkers, o.workers)
	case o.work < 0:
		return usageErrorf("--work must not be negative, got %v", o.work)
	case o.ttl != 0 && (o.ttl < dlock.MinTTL || o.ttl > dlock.MaxTTL):
		return usageErrorf("--ttl must be 0 (the library's default) or between %v and %v, got %v", dlock.MinTTL, dlock.MaxTTL, o.ttl)
	case o.timeout <= 0:
		return usageErrorf("--timeout must be positive, got %v", o.timeout)
	}
	return nil
}

// demoRun is one execution of "dlock demo": its settings, its target and
// the unique prefix of every key it writes.
type demoRun struct {
	opts   *demoOptions
	target *target
	admin  redis.UniversalClient // sets up, checks and cleans up the stock
	prefix string                // "<--key-prefix>demo:<random id>:"
}

func (a *app) demo(ctx context.Context, o *demoOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, o.timeout,
		fmt.Errorf("the demo did not finish within --timeout %v: raise --timeout, or lower --items or --work", o.timeout))
	defer cancel()

	t, err := a.conn.open(ctx, true)
	if err != nil {
		return err
	}
	defer t.Close()
	if t.embedded != nil {
		fmt.Fprintf(a.stdout, "using %s; pass --redis or set %s to use a real server\n", t.desc, redisURLEnv)
	} else {
		fmt.Fprintf(a.stdout, "using %s\n", t.desc)
	}

	id, err := randomID()
	if err != nil {
		return err
	}
	d := &demoRun{opts: o, target: t, admin: t.newClient(), prefix: a.keyPrefix + "demo:" + id + ":"}
	defer d.admin.Close()
	defer d.cleanup(ctx, a.stderr)

	ttl := "the library's default"
	if o.ttl != 0 {
		ttl = o.ttl.String()
	}
	fmt.Fprintf(a.stdout, "selling %d items with %d workers, %v of work per sale, lock TTL %s\n\n",
		o.items, o.workers, o.work, ttl)

	unlocked, err := d.phase(ctx, false)
	if err != nil {
		return fmt.Errorf("the run without a lock: %w", err)
	}
	locked, err := d.phase(ctx, true)
	if err != nil {
		return fmt.Errorf("the run with dlock: %w", err)
	}
	if err := d.report(a.stdout, unlocked, locked); err != nil {
		return err
	}
	return d.check(a.stdout, unlocked, locked)
}

func randomID() (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("reading crypto/rand for the demo's key prefix: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// phase runs the race once, with or without the lock, on a fresh stock key.
func (d *demoRun) phase(ctx context.Context, locked bool) (*phaseResult, error) {
	o := d.opts
	key := d.prefix + "stock:nolock"
	if locked {
		key = d.prefix + "stock:dlock"
	}
	if err := d.admin.Set(ctx, key, o.items, d.stockTTL()).Err(); err != nil {
		return nil, fmt.Errorf("setting up the stock: %w", err)
	}

	// Every worker gets its own go-redis client and dlock client, as
	// separate processes would have. They are made before the clock starts;
	// go-redis connects on first use.
	rdbs := make([]redis.UniversalClient, o.workers)
	lockers := make([]*dlock.Client, o.workers)
	defer func() {
		for i := range rdbs {
			if lockers[i] != nil {
				lockers[i].Close()
			}
			if rdbs[i] != nil {
				rdbs[i].Close()
			}
		}
	}()
	for i := range rdbs {
		rdbs[i] = d.target.newClient()
		if !locked {
			continue
		}
		opts := []dlock.Option{
			dlock.WithKeyPrefix(d.prefix + "lock:"),
			dlock.WithOwnerInfo(fmt.Sprintf("dlock demo worker %d", i)),
		}
		if o.ttl != 0 {
			opts = append(opts, dlock.WithTTL(o.ttl))
		}
		c, err := dlock.New(rdbs[i], opts...)
		if err != nil {
			return nil, err
		}
		lockers[i] = c
	}

	res := &phaseResult{}
	// The first worker to fail stops the others.
	wctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < o.workers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var err error
			if locked {
				err = d.lockedWorker(wctx, rdbs[i], lockers[i], key, res)
			} else {
				err = d.unlockedWorker(wctx, rdbs[i], key, res)
			}
			if err != nil {
				stop(fmt.Errorf("worker %d: %w", i, err))
			}
		}(i)
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	if wctx.Err() != nil {
		// The cause is the first worker's failure, or why ctx ended.
		return nil, fmt.Errorf("%w (%d items sold so far)", context.Cause(wctx), res.sales.Load())
	}

	n, err := d.admin.Get(ctx, key).Int64()
	if err != nil {
		return nil, fmt.Errorf("reading the final stock: %w", err)
	}
	res.finalStock = n
	return res, nil
}

// stockTTL is the stock keys' expiry, which only matters if the demo dies
// before its cleanup.
func (d *demoRun) stockTTL() time.Duration { return d.opts.timeout + time.Minute }

// unlockedWorker sells until the stock runs out, with nothing to keep the
// other workers from reading the same stock.
func (d *demoRun) unlockedWorker(ctx context.Context, rdb redis.UniversalClient, key string, res *phaseResult) error {
	for {
		sold, err := d.sellOne(ctx, rdb, key, nil)
		if err != nil || !sold {
			return err
		}
		res.sales.Add(1)
	}
}

// lockedWorker sells until the stock runs out, each sale under the lock.
func (d *demoRun) lockedWorker(ctx context.Context, rdb redis.UniversalClient, c *dlock.Client, key string, res *phaseResult) error {
	mu := c.Mutex("stock")
	lostInARow := 0
	for {
		if lostInARow == maxLostInARow {
			return fmt.Errorf("%d leases in a row were lost while held, the last with: %w", lostInARow, res.lastLoss())
		}
		asked := time.Now()
		lease, err := mu.Lock(ctx)
		if err != nil {
			return err
		}
		res.granted(lease.Token(), time.Since(asked))
		// Like Client.Do, the sale stops when the lease is lost, and does
		// not write: the lock no longer keeps others out.
		sold, err := d.sellOne(ctx, rdb, key, lease.Done())
		loss := lease.Err()
		uerr := lease.Unlock(ctx)
		if sold {
			res.sales.Add(1) // written, whatever became of the lease
		}
		switch {
		case errors.Is(err, errLeaseEnded):
			res.lost(loss)
			lostInARow++
			continue
		case err != nil:
			return err
		case errors.Is(uerr, dlock.ErrNotHeld):
			// Lost after the write (or during it): if the lock passed to
			// another worker meanwhile, the oversold count shows it.
			if loss == nil {
				loss = uerr
			}
			res.lost(loss)
			lostInARow++
		case uerr != nil:
			return uerr
		default:
			lostInARow = 0
		}
		if !sold {
			return nil
		}
	}
}

// maxLostInARow stops a worker whose leases keep being lost, e.g. with a
// --ttl too short to renew, which would otherwise retry until --timeout.
const maxLostInARow = 20

// errLeaseEnded stops a sale whose lease was lost.
var errLeaseEnded = errors.New("the lease ended during the sale")

// sellOne is the deliberately unsafe read-modify-write: read the stock, work
// a little, write it back minus one. It reports whether it sold an item. It
// gives up with errLeaseEnded, writing nothing, once leaseDone is closed
// (nil: no lease).
func (d *demoRun) sellOne(ctx context.Context, rdb redis.UniversalClient, key string, leaseDone <-chan struct{}) (bool, error) {
	n, err := rdb.Get(ctx, key).Int64()
	if err != nil {
		return false, fmt.Errorf("reading the stock: %w", err)
	}
	if n <= 0 {
		return false, nil
	}
	if err := work(ctx, d.opts.work, leaseDone); err != nil {
		return false, err
	}
	if err := rdb.Set(ctx, key, n-1, d.stockTTL()).Err(); err != nil {
		return false, fmt.Errorf("writing the stock: %w", err)
	}
	return true, nil
}

// work simulates d of work. It stops early when ctx ends or leaseDone is
// closed (nil: no lease to watch).
func work(ctx context.Context, d time.Duration, leaseDone <-chan struct{}) error {
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-leaseDone:
			return errLeaseEnded
		}
	}
	// Look again right before the write. A gap remains between this check
	// and the write, which only a fenced resource can close.
	select {
	case <-leaseDone:
		return errLeaseEnded
	default:
		return ctx.Err()
	}
}
