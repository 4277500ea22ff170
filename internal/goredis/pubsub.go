package goredis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// pubsubKind caches which pub/sub a Cluster's servers offer: unknown until
// probed, then plain (PUBLISH, broadcast to every node) or sharded
// (SPUBLISH, delivered by the slot's own nodes; Redis 7.0 and later).
type pubsubKind struct {
	mu      sync.Mutex
	kind    atomic.Int32
	retryAt time.Time // after a failed probe, when to probe again
}

const (
	pubsubUnknown int32 = iota
	pubsubPlain
	pubsubSharded
)

// probeTimeout bounds the probe, and probeRetry spaces probes after one
// failed (the cluster was unreachable): meanwhile PUBLISH is used.
const (
	probeTimeout = 2 * time.Second
	probeRetry   = time.Second
)

// publishCommand is PublishCommand: SPUBLISH on a Cluster whose servers have
// it, so that a release notifies only the nodes of the lock's slot (plain
// PUBLISH is broadcast over the cluster bus to every node), else PUBLISH.
func (d *Driver) publishCommand() string {
	if sharded, _ := d.shardedPubSub(context.Background()); sharded {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

// shardedPubSub reports whether this driver uses sharded pub/sub: only on
// a Cluster whose servers know SPUBLISH (COMMAND INFO, asked once). The
// answer is kept for the driver's life, so its publishes and its
// subscription always agree. Mixed servers (during an upgrade to 7.0) are
// not supported: the answer is the first node's.
func (d *Driver) shardedPubSub(ctx context.Context) (bool, error) {
	cc, ok := d.rdb.(*redis.ClusterClient)
	if !ok {
		return false, nil
	}
	if k := d.pubsub.kind.Load(); k != pubsubUnknown {
		return k == pubsubSharded, nil
	}
	d.pubsub.mu.Lock()
	defer d.pubsub.mu.Unlock()
	if k := d.pubsub.kind.Load(); k != pubsubUnknown {
		return k == pubsubSharded, nil
	}
	if time.Now().Before(d.pubsub.retryAt) {
		return false, errors.New("dlock: the Cluster could not be asked whether it has sharded pub/sub")
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	info, err := cc.Do(pctx, "command", "info", "spublish").Slice()
	switch {
	case err == nil:
		if len(info) == 1 && info[0] != nil {
			d.pubsub.kind.Store(pubsubSharded)
			return true, nil
		}
		d.pubsub.kind.Store(pubsubPlain)
	case isServerError(err):
		d.pubsub.kind.Store(pubsubPlain) // COMMAND refused (renamed, ACL): stay with what always works
	default:
		d.pubsub.retryAt = time.Now().Add(probeRetry)
		return false, fmt.Errorf("dlock: asking the Cluster whether it has sharded pub/sub: %w", err)
	}
	return false, nil
}
