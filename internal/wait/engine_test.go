package wait

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/dlock-go/dlock/driver"
)

// A subscription that fails because the Redis client was closed sends the
// waiter to attempt at once, which ends its wait: the wake-up that tells
// waiters so may have come before it registered. Another failure (a proxy
// that refuses pub/sub) leaves it polling.
func TestSubscribeEndedByAClosedClientAttemptsAtOnce(t *testing.T) {
	for _, c := range []struct {
		err   error
		again bool
	}{
		{fmt.Errorf("subscribe: %w: redis: client is closed", driver.ErrClientClosed), true},
		{errors.New("ERR unknown command 'SUBSCRIBE'"), false},
		{nil, true}, // confirmed only now: a message may have gone unheard
	} {
		w := &run{ctx: context.Background(), cfg: &Settings{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
		again, err := w.subscribeEnded(c.err)
		if again != c.again || err != nil {
			t.Errorf("subscribeEnded(%v) = %v, %v; want %v, nil", c.err, again, err, c.again)
		}
	}
}
