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
	return fillEvalArgs(make([]any, 3+len(c.Keys)+len(c.Args)), c, eval, routed)
}

// argv is a command line reused across calls: go-redis reads a command's
// arguments only while it sends it, and the driver drops the command once
// it has read the reply, so the slice can serve the next call. That is one
// allocation fewer per script call. (A go-redis hook that kept a command
// past its call would see its arguments change; hooks that record commands,
// such as OpenTelemetry's, read them during the call.)
type argv struct{ args []any }

var argvPool = sync.Pool{New: func() any { return &argv{args: make([]any, 0, 16)} }}

// getArgv takes a command line from the pool; putArgv gives it back once
// the command's reply has been read.
func getArgv() *argv { return argvPool.Get().(*argv) }

func putArgv(a *argv) {
	if cap(a.args) > 64 {
		return // an outsized call's line: let it go
	}
	clear(a.args)
	a.args = a.args[:0]
	argvPool.Put(a)
}

// eval fills a with c's command line, as evalArgs builds it.
func (a *argv) eval(c *driver.Call, eval, routed bool) []any {
	n := 3 + len(c.Keys) + len(c.Args)
	if cap(a.args) < n {
		a.args = make([]any, n)
	}
	a.args = a.args[:n]
	return fillEvalArgs(a.args, c, eval, routed)
}

// fillEvalArgs writes c's command line into args, which has its length.
func fillEvalArgs(args []any, c *driver.Call, eval, routed bool) []any {
	n := len(c.Keys)
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
