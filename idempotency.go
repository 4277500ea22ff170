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
// with it makes, so that the caller can retry that call after an error without
// counting twice. It applies to Latch.CountDown, Latch.TrySetCount and
// Semaphore.AddPermits: given the same key on the same latch or semaphore and
// method, such a call takes effect at most once, and a repeat answers as if it
// had just taken effect. A key is remembered for a minute after its call took
// effect; a call that took no effect is not remembered. Use a key per logical
// change and per caller; other calls ignore it. The key must be non-empty and
// at most MaxIdempotencyKeyLen bytes, or the call fails with
// ErrInvalidArgument and sends nothing.
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
