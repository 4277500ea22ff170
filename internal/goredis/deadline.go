package goredis

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/driverkit"
)

// clientTimeouts reads what a go-redis client's options say about ending a
// call by themselves, for driverkit's choice of when Run needs a goroutine
// of its own to return at its context's end (driverkit.Ends), and the read
// timeout (ReplyTimeout).
//
// go-redis bounds a command by its context's deadline only when the client
// was built with ContextTimeoutEnabled; otherwise a command blocked on a
// silent server waits for the client's ReadTimeout (3 s by default),
// whatever the context says. go-redis normalizes the options it is given:
// in Options(), a timeout > 0 bounds every read or write; 0 means none
// (the call waits for ever); -1 means the client never sets a deadline,
// not even a context's. A wrapper, whose options dlock cannot read, is
// assumed to end nothing by itself.
func clientTimeouts(rdb Client) (ends driverkit.Ends, read time.Duration) {
	var (
		ctxTimeout bool
		write      time.Duration
	)
	switch c := rdb.(type) {
	case *redis.Client:
		o := c.Options()
		ctxTimeout, read, write = o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout
	case *redis.ClusterClient:
		o := c.Options()
		ctxTimeout, read, write = o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout
	default:
		return driverkit.Ends{}, 0
	}
	return driverkit.Ends{
		Deadline: ctxTimeout && read >= 0 && write >= 0,
		Timeouts: read > 0 && write > 0,
	}, max(read, 0)
}
