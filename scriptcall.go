package dlock

import (
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// What the Redlock, MultiLock, Latch and inspection still read themselves.

// extendArgs returns the arguments of an extend script: args, followed by
// the flag that lets it shorten a hold when shorten is set.
func extendArgs(shorten bool, args ...any) []any {
	if shorten {
		return append(args, 1)
	}
	return args
}

func ms(n int64) time.Duration { return protocol.Millis(n) }

// replyInts reads the first n elements of an array reply as integers.
func replyInts(reply any, n int) ([]int64, error) {
	items, ok := reply.([]any)
	if !ok || len(items) < n {
		return nil, errs.Unexpected(reply)
	}
	out := make([]int64, n)
	for i := range out {
		v, ok := items[i].(int64)
		if !ok {
			return nil, errs.Unexpected(reply)
		}
		out[i] = v
	}
	return out, nil
}
