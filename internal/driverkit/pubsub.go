package driverkit

import (
	"github.com/dlock-go/dlock/driver"
)

// PubSub is how a Lib's subscriptions connect.
type PubSub struct {
	// Dial opens a new dedicated connection for pub/sub whose messages and
	// subscription confirmations go to h. It does not fail: a connection
	// that cannot be made reports it through PubSubConn.Lost. It may block
	// for the library's dial timeout (rueidis's Dedicate takes no context):
	// the subscription calls it from a goroutine that Close does not wait
	// for.
	Dial func(h Hooks) PubSubConn
}

// PublishCommand implements driver.Driver.
//
// Plain PUBLISH reaches a subscriber connected to any node, Cluster included
// (where the message is broadcast over the cluster bus), so the subscription
// may use any node.
func (d *Driver[C]) PublishCommand() string { return "PUBLISH" }

// Subscribe implements driver.Driver. The subscription connects on its
// first Subscribe, through Lib.PubSub.Dial.
func (d *Driver[C]) Subscribe(h driver.Handler) driver.Subscription {
	return newSubscription(d.lib.PubSub.Dial, h)
}
