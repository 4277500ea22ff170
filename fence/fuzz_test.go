package fence

import (
	"errors"
	"testing"

	"github.com/dlock-go/dlock/internal/chaos"
)

// FuzzParseReplies feeds the reply parsers every shape of reply: they must
// never panic, and must either succeed, report a stale token, or say the
// reply was unexpected.
func FuzzParseReplies(f *testing.F) {
	for _, r := range []any{
		[]any{int64(1), "v"}, []any{int64(1), nil}, []any{int64(1)}, []any{int64(0), "17"},
		[]any{int64(0)}, []any{}, nil, int64(1), "x", []any{int64(2), "v"}, []any{"1", int64(1)},
	} {
		f.Add(chaos.ReplyBytes(r))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		reply := chaos.Reply(data)
		_, _, err := parseGet("k", 3, reply)
		check(t, "get", reply, err)
		check(t, "set", reply, parseSet("k", 3, reply))
	})
}

func check(t *testing.T, op string, reply any, err error) {
	var se *StaleTokenError
	switch {
	case err == nil:
	case errors.As(err, &se):
		if se.Key != "k" || se.Token != 3 {
			t.Fatalf("%s %#v: %+v", op, reply, se)
		}
	case err.Error() == unexpected(reply).Error():
	default:
		t.Fatalf("%s %#v: unexpected error %v", op, reply, err)
	}
}
