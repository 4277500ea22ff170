package driverkit

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/dlock-go/dlock/driver"
)

// ServerError wraps an error reply from the server in a *driver.ReplyError
// whose Msg is err's message, keeping err for errors.As.
//
// rueidis and valkey-go drop a leading "ERR " from messages (the codes the
// core checks, such as WRONGTYPE, NOSCRIPT or a script's DLOCK_CONFLICT,
// are kept).
func ServerError(err error) *driver.ReplyError {
	return &driver.ReplyError{Msg: err.Error(), Err: err}
}

// Normalize turns a reply decoded by the library's ToAny (nil, int64,
// string, float64, bool, []any, map[string]any, or an error for an error
// reply inside an array) into the driver conventions: nil, int64, string,
// *driver.ReplyError, or []any of those. RESP3-only types become what the
// server sends a RESP2 client: a double becomes its decimal string, a
// boolean 1 or 0, and a map a flat key-value array (in key order here).
// Scripts reply with RESP3 types only after redis.setresp(3); dlock's never
// do.
func Normalize(v any) any {
	switch v := v.(type) {
	case nil, int64, string:
		return v
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = Normalize(e)
		}
		return out
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([]any, 0, 2*len(v))
		for _, k := range keys {
			out = append(out, k, Normalize(v[k]))
		}
		return out
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case bool:
		if v {
			return int64(1)
		}
		return int64(0)
	case error:
		return ServerError(v)
	}
	// Not produced by ToAny; keep it visible rather than drop it.
	return fmt.Sprint(v)
}

// Args formats a call's arguments, strings or integers (or pointers to
// them), as the strings a command builder takes.
func Args(in []any) []string {
	out := make([]string, len(in))
	for i, a := range in {
		switch a := a.(type) {
		case string:
			out[i] = a
		case *string:
			out[i] = *a
		case int:
			out[i] = strconv.Itoa(a)
		case int64:
			out[i] = strconv.FormatInt(a, 10)
		case *int64:
			out[i] = strconv.FormatInt(*a, 10)
		case []byte:
			out[i] = string(a)
		default:
			out[i] = fmt.Sprint(a)
		}
	}
	return out
}
