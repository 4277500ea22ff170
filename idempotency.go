package dlock

import (
	"context"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/ownerid"
)

// MaxIdempotencyKeyLen is the longest key WithIdempotencyKey accepts, in
// bytes.
const MaxIdempotencyKeyLen = 256

type idempotencyKeyCtx struct{}

// WithIdempotencyKey returns a copy of ctx that names the change a call made
// with it makes, so that the caller can retry that call after an error
// without counting twice. It applies to Latch.CountDown, Latch.TrySetCount
// and Semaphore.AddPermits, the calls whose error leaves the caller unable to
// tell whether they took effect ("the count may then have been decremented
// or not"): given the same key on the same latch or semaphore, such a call
// takes effect at most once. A call repeated after the first took effect
// changes nothing and answers as if it had just done so: CountDown returns
// nil, TrySetCount true, and AddPermits the limit in force.
//
// The latch or semaphore remembers a key for a minute after the call made
// with it took effect (the memory that already keeps a command go-redis
// sends again from counting twice), so retry within that minute; a key used
// again later counts again. A call that took no effect (a CountDown of a
// latch at zero, a TrySetCount that found it counting, an AddPermits refused
// as out of range) is not remembered, and a retry may take effect. Keys are
// apart per method: the same key given to CountDown and to TrySetCount of
// one latch names two changes.
//
// Use a key per logical change and per caller, such as a job's id and its
// step ("import-2024-06-01/shard-7"); the calls of other methods ignore it.
// Without a key every call is a change of its own. The key must be
// non-empty and at most MaxIdempotencyKeyLen bytes: otherwise the call
// fails with ErrInvalidArgument and sends nothing.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, idempotencyKeyCtx{}, key)
}

// IdempotencyKeyFrom returns the idempotency key ctx carries, if any.
func IdempotencyKeyFrom(ctx context.Context) (string, bool) {
	key, ok := ctx.Value(idempotencyKeyCtx{}).(string)
	return key, ok
}

// changeID returns the id that a script remembers a change by: the caller's
// idempotency key, prefixed by "k" and the method's letter, or else a fresh
// random one (newCallID's hex, which never starts with "k", so neither kind
// can stand for the other).
// The error names op and name.
func changeID(ctx context.Context, method byte, op, name string) (string, error) {
	key, ok := IdempotencyKeyFrom(ctx)
	if !ok {
		return ownerid.CallID()
	}
	var err error
	switch {
	case key == "":
		err = errs.InvalidArgf("empty idempotency key")
	case len(key) > MaxIdempotencyKeyLen:
		err = errs.InvalidArgf("idempotency key of %d bytes is longer than %d", len(key), MaxIdempotencyKeyLen)
	default:
		return "k" + string(method) + ":" + key, nil
	}
	return "", errs.Errorf("dlock: %s %q: %w", op, name, err)
}
