package goredis

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/dlock-go/dlock/driver"
)

// countedArg is a command argument that go-redis writes through
// MarshalBinary, which counts the writes: go-redis writes a command again
// when it lost the reply (its MaxRetries), although the server may have run
// it, and the count tells the driver so (driver.Call.Resent). A script
// call's second argument is one, the script's hash (EVALSHA) or source
// (EVAL), which costs no allocation: the bytes are the script's, made
// once. So is the value of SetNX's native SET.
type countedArg struct {
	b      []byte
	writes atomic.Int32
}

// MarshalBinary implements encoding.BinaryMarshaler for go-redis's writer.
func (s *countedArg) MarshalBinary() ([]byte, error) {
	s.writes.Add(1)
	return s.b, nil
}

// String is what hooks that print a command's arguments show.
func (s *countedArg) String() string { return string(s.b) }

// set points s at c's hash or source and clears its count.
func (s *countedArg) set(c *driver.Call, eval bool) {
	b := bytesOf(c.Script)
	if eval {
		s.b = b.source
	} else {
		s.b = b.hash
	}
	s.writes.Store(0)
}

// resent reports whether go-redis wrote the argument more than once.
func (s *countedArg) resent() bool { return s.writes.Load() > 1 }

// argv is a command line reused across calls: go-redis reads a command's
// arguments only while it sends it, and the driver drops the command once
// it has read the reply, so the slice can serve the next call. That is one
// allocation fewer per script call. (A go-redis hook that kept a command
// past its call would see its arguments change; hooks that record commands,
// such as OpenTelemetry's, read them during the call.)
type argv struct {
	args   []any
	script countedArg // args[1]
}

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
	a.script.b = nil
	argvPool.Put(a)
}

// eval fills a with c's command line: EVALSHA, or EVAL with the source.
// routed keeps the first key a string, for clients that route by it.
// Hashes and key counts come from interfaces boxed once, and keys go in as
// *string, which go-redis writes like a string but which fits in an
// interface without an allocation. Only a client that routes by key
// (ClusterClient, Ring) reads the first key, as a string: for those it
// stays one (routed). Building the line ourselves, rather than through
// go-redis's EvalSha, saves most of the allocations of a call: go-redis
// boxes the script hash, the key count and every key into a fresh slice.
func (a *argv) eval(c *driver.Call, eval, routed bool) *argv {
	k := len(c.Keys)
	n := 3 + k + len(c.Args)
	if cap(a.args) < n {
		a.args = make([]any, n)
	}
	args := a.args[:n]
	a.args = args
	a.script.set(c, eval)
	if eval {
		args[0] = "eval"
	} else {
		args[0] = "evalsha"
	}
	args[1] = &a.script
	args[2] = numKeysArg(k)
	if k > 0 {
		if routed {
			args[3] = c.Keys[0]
		} else {
			args[3] = &c.Keys[0]
		}
		for i := 1; i < k; i++ {
			args[3+i] = &c.Keys[i]
		}
	}
	copy(args[3+k:], c.Args)
	return a
}

// wait fills a with c's WAIT.
func (a *argv) wait(c *driver.Call) *argv {
	return a.line("wait", c.Replicas, c.ReplicaTimeout.Milliseconds())
}

// line fills a with args, a command that is no script.
func (a *argv) line(args ...any) *argv {
	a.args = append(a.args[:0], args...)
	a.script.b = nil
	a.script.writes.Store(0)
	return a
}

// scriptBytes are a script's hash and source as go-redis writes them.
type scriptBytes struct{ hash, source []byte }

var scriptBytesOf sync.Map // *driver.Script -> *scriptBytes

func bytesOf(s *driver.Script) *scriptBytes {
	if v, ok := scriptBytesOf.Load(s); ok {
		return v.(*scriptBytes)
	}
	v, _ := scriptBytesOf.LoadOrStore(s, &scriptBytes{hash: []byte(s.Hash()), source: []byte(s.Source())})
	return v.(*scriptBytes)
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
