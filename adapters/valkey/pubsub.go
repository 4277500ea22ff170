package dlockvalkey

import (
	"context"

	"github.com/valkey-io/valkey-go"

	"github.com/dlock-go/dlock/internal/driverkit"
)

// pubsubConn is the subscription's connection: a valkey-go dedicated client
// whose pub/sub hooks report to the driver.
type pubsubConn struct {
	dc   valkey.DedicatedClient
	lost <-chan error
}

// dialPubSub takes a connection out of client's pool of dedicated ones (on a
// Cluster, valkey-go connects it to some node on the first command: PUBLISH
// reaches every node). The connection leaves the pool for good: Close
// closes it.
func dialPubSub(client valkey.Client, h driverkit.Hooks) *pubsubConn {
	dc, _ := client.Dedicate() // dc.Close releases it too
	lost := dc.SetPubSubHooks(valkey.PubSubHooks{
		OnMessage: func(m valkey.PubSubMessage) { h.Message(m.Channel, m.Message) },
		OnSubscription: func(s valkey.PubSubSubscription) {
			if s.Kind == "subscribe" {
				h.Subscribed(s.Channel)
			}
		},
	})
	return &pubsubConn{dc: dc, lost: lost}
}

func (c *pubsubConn) Subscribe(ctx context.Context, channels ...string) error {
	return replyErr(c.dc.Do(ctx, c.dc.B().Subscribe().Channel(channels...).Build()))
}

func (c *pubsubConn) Unsubscribe(ctx context.Context, channels ...string) error {
	return replyErr(c.dc.Do(ctx, c.dc.B().Unsubscribe().Channel(channels...).Build()))
}

func (c *pubsubConn) Lost() <-chan error { return c.lost }

func (c *pubsubConn) Close() { c.dc.Close() }

// replyErr returns the error of a (UN)SUBSCRIBE: valkey-go answers success with
// an empty message, which is not a reply ToAny can read.
func replyErr(r valkey.ValkeyResult) error {
	err := r.Error()
	if rerr, ok := valkey.IsValkeyErr(err); ok {
		return driverkit.ServerError(rerr)
	}
	return err
}
