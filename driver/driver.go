// Package driver is the seam between dlock and a Redis client library.
//
// dlock talks to Redis through a Driver: it runs Lua scripts (pipelined when
// it has several to send) and keeps one shared pub/sub subscription. The
// dlock package ships a Driver for github.com/redis/go-redis/v9 and uses it
// in dlock.New; adapters for other client libraries implement Driver and
// pass it to dlock.NewWithDriver. Most users never import this package.
package driver

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"time"
)

// ErrClientClosed marks a failure because the client library's client was
// closed: nothing sent through it can succeed again, so a waiting Lock
// returns it at once instead of retrying until its context ends. A Driver
// wraps the library's own error with it (fmt.Errorf("%w: %w",
// ErrClientClosed, err)) when the library tells a closed client apart from
// a connection that failed.
var ErrClientClosed = errors.New("the Redis client is closed")

// Script is a Lua script identified by the SHA1 of its source, which is how
// Redis names it in EVALSHA. A Script is immutable and safe for concurrent use.
type Script struct {
	src  string
	hash string
}

// NewScript returns the Script for src.
func NewScript(src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{src: src, hash: hex.EncodeToString(sum[:])}
}

// Source returns the script's Lua source, for EVAL.
func (s *Script) Source() string { return s.src }

// Hash returns the lowercase hex SHA1 of the source, for EVALSHA.
func (s *Script) Hash() string { return s.hash }

// Call is one script invocation and, after Driver.Run, its outcome.
//
// The caller fills Script, Keys, Args and optionally Replicas; the driver
// fills Reply, Acked and Err. Every key the script touches is in Keys, and
// all of them share one hash tag, so a Call always targets one Cluster slot.
type Call struct {
	// Script is the script to run.
	Script *Script
	// Keys are the script's KEYS: every key it touches, all with one hash tag.
	Keys []string
	// Args are strings or integers (int, int64), or pointers to a string
	// or an int64, which a caller may use to pass values it keeps anyway
	// without boxing each one (a pointer fits in an interface without an
	// allocation). They are read during Run only.
	Args []any

	// Replicas, when positive, asks the driver to send WAIT Replicas
	// ReplicaTimeout on the same connection right after the script, so the
	// reply tells how many replicas acknowledged the script's writes.
	Replicas int
	// ReplicaTimeout is WAIT's timeout, sent in whole milliseconds.
	ReplicaTimeout time.Duration

	// Reply is the script's reply: nil, int64, string or []any of those.
	Reply any
	// Acked is WAIT's reply when Replicas was positive.
	Acked int
	// Err is the transport error or the error reply, if any. A server error
	// reply is a *ReplyError; a call Run stopped waiting for while it was
	// on its way may have an *InFlightError.
	Err error
	// Resent reports that the client library wrote the script more than
	// once for this call (it lost a reply and tried again, as go-redis does
	// on a read timeout or a reset connection), so the script may have run
	// more than once: a release sent again finds the lock its first sending
	// released already. Drivers that cannot tell leave it false.
	Resent bool
}

// ReplyError is an error reply from the Redis server (as opposed to a
// transport failure), such as "WRONGTYPE ..." or "LOADING ...".
type ReplyError struct {
	// Msg is the server's error message, starting with its error code
	// ("WRONGTYPE", "LOADING", ...).
	Msg string
	// Err is the client library's original error value, kept for errors.As.
	Err error
}

// Error returns the server's message.
func (e *ReplyError) Error() string { return e.Msg }

// Unwrap returns the client library's original error.
func (e *ReplyError) Unwrap() error { return e.Err }

// InFlightError is a call's Err when Run returned at its context's end while
// the call was still on its way (written, or about to be, its reply unread),
// so the script may still run on the server. A Driver sets it when a later
// command could reach the server first (go-redis uses a pooled connection
// per command); dlock then holds back the clean-up of an abandoned acquire
// until the acquire is done with. A Driver whose commands to one server
// keep their order need not set it.
type InFlightError struct {
	// Err is the context's error.
	Err error
	// Done is closed once the client library has finished with the call:
	// its reply came back, or it failed, and the outcome was dropped.
	Done <-chan struct{}
}

// Error returns Err's message.
func (e *InFlightError) Error() string { return e.Err.Error() }

// Unwrap returns Err, so that errors.Is(err, context.DeadlineExceeded)
// holds for a call abandoned at its deadline.
func (e *InFlightError) Unwrap() error { return e.Err }

// Driver runs dlock's commands on one Redis deployment (a standalone server,
// a Sentinel-managed master or a Cluster). Implementations must be safe for
// concurrent use.
type Driver interface {
	// Run executes the calls and stores each outcome in its Call. It sends
	// EVALSHA and, when the server answers NOSCRIPT (after SCRIPT FLUSH, a
	// restart or a failover), falls back to EVAL transparently. Several calls
	// should be pipelined into as few round trips as the deployment allows.
	// Run returns when every call has an outcome or ctx ends.
	Run(ctx context.Context, calls ...*Call)

	// PublishCommand names the command scripts use to notify waiters:
	// "PUBLISH", or "SPUBLISH" where sharded pub/sub is in use (Cluster).
	// Subscriptions made through Subscribe must receive what it sends.
	PublishCommand() string

	// Subscribe opens a subscription whose messages and resets go to h. It
	// connects lazily, on the first channel subscribed.
	Subscribe(h Handler) Subscription
}

// Handler receives what a Subscription hears. Its methods are called from the
// subscription's own goroutine, one at a time, and must not block.
type Handler interface {
	// Message is called for each message published on a subscribed channel.
	Message(channel, payload string)
	// Reset is called after the subscription reconnected: messages published
	// while it was down are lost, so waiters should check the server again.
	// It is also called once when the client library's client is closed, so
	// that waiters learn it from their next attempt (ErrClientClosed) at
	// once.
	Reset()
}

// Subscription is a shared pub/sub subscription over a set of channels that
// grows and shrinks at run time.
type Subscription interface {
	// Subscribe adds channels and returns once the server has confirmed all
	// of them, so a message published afterwards is delivered.
	Subscribe(ctx context.Context, channels ...string) error
	// Unsubscribe removes channels.
	Unsubscribe(ctx context.Context, channels ...string) error
	// Close ends the subscription and waits for its goroutines to stop.
	Close() error
}

// Sharded is implemented by drivers for deployments that spread keys over
// hash slots (Redis Cluster). A script can only touch keys of one slot
// there, so dlock groups the keys of multi-name operations by slot. A driver
// that does not implement Sharded, or reports false, is treated as one
// server where any keys may go together.
type Sharded interface {
	// Sharded reports whether the deployment is a Redis Cluster.
	Sharded() bool
}

// ReplyTimeouter is implemented by drivers whose Redis client gives up on a
// reply after a fixed time. It is optional: dlock then rejects a
// WithReplicaAck timeout that is not shorter, since a WAIT that runs out
// would be read as a broken connection rather than as too few replicas.
type ReplyTimeouter interface {
	// ReplyTimeout returns how long the client waits for a reply; zero when
	// it does not say, or waits without limit.
	ReplyTimeout() time.Duration
}

// Scanner is implemented by drivers that can list the keys of the
// deployment, which Client.List needs (the rest of dlock never lists keys).
// It is optional: without it, List reports that it is unsupported.
type Scanner interface {
	// Scan calls each with every key that matches the Redis glob pattern
	// match (SCAN's MATCH syntax), on every master of the deployment, until
	// each returns false. As with SCAN, a key may be passed more than once,
	// and keys created or deleted meanwhile may or may not be. each is
	// called from one goroutine at a time. Scan returns the first failure.
	Scan(ctx context.Context, match string, each func(key string) bool) error
}
