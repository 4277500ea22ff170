package goredis

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
)

var _ driver.ReplyTimeouter = (*Driver)(nil)

// ReplyTimeout implements driver.ReplyTimeouter: go-redis's ReadTimeout for
// the clients that say it (a Sentinel-managed master's client is a
// *redis.Client too), zero for wrappers and for no limit (-1).
func (d *Driver) ReplyTimeout() time.Duration {
	var read time.Duration
	switch c := d.rdb.(type) {
	case *redis.Client:
		read = c.Options().ReadTimeout
	case *redis.ClusterClient:
		read = c.Options().ReadTimeout
	}
	return max(read, 0)
}
