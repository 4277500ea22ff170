package goredis

import (
	"time"

	"github.com/dlock-go/dlock/driver"
)

var _ driver.ReplyTimeouter = (*Driver)(nil)

// ReplyTimeout implements driver.ReplyTimeouter: go-redis's ReadTimeout for
// the clients whose options dlock reads (clientTimeouts; a Sentinel-managed
// master's client is a *redis.Client too), zero for wrappers and for no
// limit.
func (d *Driver) ReplyTimeout() time.Duration { return d.io.read }
