package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/glob"
)

// cleanupTimeout bounds the deletion of the demo's keys, which runs even
// after the demo was interrupted.
const cleanupTimeout = 5 * time.Second

// cleanup deletes every key the demo wrote: the stock keys and the lock's
// keys all start with d.prefix. It runs even when ctx was cancelled.
func (d *demoRun) cleanup(ctx context.Context, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := deleteByPrefix(ctx, d.admin, d.prefix); err != nil {
		fmt.Fprintf(stderr, "dlock: warning: could not delete the demo's keys %s*: %v (they expire within an hour)\n", d.prefix, err)
	}
}

// deleteByPrefix deletes every key that starts with prefix: on every master
// of a Cluster, and with one DEL per key, since the keys of a batch may lie
// in different slots.
func deleteByPrefix(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return deleteMatching(ctx, node, rdb, prefix)
		})
	}
	return deleteMatching(ctx, rdb, rdb, prefix)
}

// deleteMatching deletes, through del, the keys that start with prefix on
// the one server scan reaches, in pipelined batches.
func deleteMatching(ctx context.Context, scan, del redis.Cmdable, prefix string) error {
	iter := scan.Scan(ctx, 0, glob.Escape(prefix)+"*", 100).Iterator()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_, err := del.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range batch {
				p.Del(ctx, k)
			}
			return nil
		})
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 100 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	return flush()
}
