package protocol

import (
	"math"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
)

// Millis is n milliseconds as a Duration, saturated rather than
// overflowed into a negative one: a key can carry a PTTL beyond what a
// Duration holds.
func Millis(n int64) time.Duration {
	switch {
	case n > math.MaxInt64/int64(time.Millisecond):
		return math.MaxInt64
	case n < math.MinInt64/int64(time.Millisecond):
		return math.MinInt64
	}
	return time.Duration(n) * time.Millisecond
}

// Reply3 reads the first three elements of an array reply as integers,
// without the slice Ints allocates.
func Reply3(reply any) (a, b, c int64, err error) {
	items, ok := reply.([]any)
	if !ok || len(items) < 3 {
		return 0, 0, 0, errs.Unexpected(reply)
	}
	var okA, okB, okC bool
	a, okA = items[0].(int64)
	b, okB = items[1].(int64)
	c, okC = items[2].(int64)
	if !okA || !okB || !okC {
		return 0, 0, 0, errs.Unexpected(reply)
	}
	return a, b, c, nil
}

// Ints reads the first n elements of an array reply as integers.
func Ints(reply any, n int) ([]int64, error) {
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
