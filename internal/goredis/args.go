package goredis

import (
	"strconv"
	"sync"

	"github.com/dlock-go/dlock/driver"
)

// Building EVALSHA's arguments ourselves, rather than through go-redis's
// EvalSha, saves most of the allocations of a call: go-redis boxes the
// script hash, the key count and every key into a fresh slice. Here the
// hash and the count come from interfaces boxed once, and keys go in as
// *string, which go-redis writes like a string but which fits in an
// interface without an allocation. Only a client that routes by key
// (ClusterClient, Ring) reads the first key, as a string: for those it
// stays one (routed).

// evalArgs returns the command line of c: EVALSHA, or EVAL with the source.
// routed keeps the first key a string, for clients that route by it.
func evalArgs(c *driver.Call, eval, routed bool) []any {
	n := len(c.Keys)
	args := make([]any, 3+n+len(c.Args))
	if eval {
		args[0], args[1] = "eval", c.Script.Source()
	} else {
		args[0], args[1] = "evalsha", hashArg(c.Script)
	}
	args[2] = numKeysArg(n)
	if n > 0 {
		if routed {
			args[3] = c.Keys[0]
		} else {
			args[3] = &c.Keys[0]
		}
		for i := 1; i < n; i++ {
			args[3+i] = &c.Keys[i]
		}
	}
	copy(args[3+n:], c.Args)
	return args
}

var hashArgs sync.Map // *driver.Script -> any holding its hash

func hashArg(s *driver.Script) any {
	if v, ok := hashArgs.Load(s); ok {
		return v
	}
	v, _ := hashArgs.LoadOrStore(s, any(s.Hash()))
	return v
}

// numKeys holds the boxed key counts scripts use; ClusterClient reads the
// count as a string to find the first key, so it is one.
var numKeys = func() []any {
	out := make([]any, 33)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}()

func numKeysArg(n int) any {
	if n < len(numKeys) {
		return numKeys[n]
	}
	return strconv.Itoa(n)
}
