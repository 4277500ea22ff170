//go:build linux

package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/chaos"
	"github.com/dlock-go/dlock/internal/scripts"
)

// cmdHook is a go-redis hook that records the lock scripts a client sends
// (Cmd events): renewals, releases and acquisitions, with their owner.
type cmdHook struct {
	rec  *chaos.Recorder
	proc string
	ops  map[string]string // script SHA1 or source -> "renew", "release", "release-hold", "acquire"
}

func newCmdHook(rec *chaos.Recorder, proc string) *cmdHook {
	h := &cmdHook{rec: rec, proc: proc, ops: map[string]string{}}
	for op, ss := range map[string][]*driver.Script{
		"renew":   {scripts.OwnedExtend, scripts.RWExtend},
		"release": {scripts.MutexRelease, scripts.MutexTransfer, scripts.OwnedRelease, scripts.RWRelease},
		// A reentrant lock's hold: a "release" when it was the owner's last.
		"release-hold": {scripts.ReentrantRelease},
		"acquire":      {scripts.MutexAcquire, scripts.RedlockAcquire},
	} {
		for _, s := range ss {
			h.ops[s.Hash()] = op
			h.ops[s.Source()] = op
		}
	}
	return h
}

func (h *cmdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cmdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		op, owner := h.classify(cmd)
		if op == "" {
			return next(ctx, cmd)
		}
		t0 := chaos.Now()
		err := next(ctx, cmd)
		h.record(op, owner, t0, cmd)
		return err
	}
}

func (h *cmdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		t0 := chaos.Now()
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if op, owner := h.classify(cmd); op != "" {
				h.record(op, owner, t0, cmd)
			}
		}
		return err
	}
}

// classify names a script call and finds its owner, ARGV[1] of every
// script it records, less the hold id (32 hex digits) that starts it for a
// reentrant lock (a hold's release names the hold, a renewal the grant's
// hold): the suite knows a reentrant holder by its owner value
// (chaosOwner).
func (h *cmdHook) classify(cmd redis.Cmder) (op, owner string) {
	args := cmd.Args()
	if len(args) < 3 {
		return "", ""
	}
	if name := argString(args[0]); !strings.EqualFold(name, "evalsha") && !strings.EqualFold(name, "eval") {
		return "", ""
	}
	op = h.ops[argString(args[1])]
	numKeys, err := strconv.Atoi(argString(args[2]))
	if op == "" || err != nil || len(args) <= 3+numKeys {
		return "", ""
	}
	owner = argString(args[3+numKeys])
	if op == "release-hold" {
		owner = chaosOwner(reentrantKeySuffix, owner)
	} else {
		owner = chaosOwner(argString(args[3]), owner)
	}
	return op, owner
}

// reentrantKeySuffix ends the key of a reentrant lock.
const reentrantKeySuffix = ":re"

// chaosOwner is the owner the suite records for value, found in key (or a
// script's ARGV[1] on key): a reentrant lock's key, and its holds, start
// with a hold id, which it leaves out, so that every hold and grant of one
// owner reads as that owner (dlock.LeaseOwner).
func chaosOwner(key, value string) string {
	if strings.HasSuffix(key, reentrantKeySuffix) && len(value) > 32 {
		return value[32:]
	}
	return value
}

// argString reads a command argument as go-redis writes it: drivers pass
// strings, pointers to strings (to save allocations), and integers.
func argString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case *string:
		return *v
	case []byte:
		return string(v)
	case *int64:
		return strconv.FormatInt(*v, 10)
	}
	return fmt.Sprint(v)
}

func (h *cmdHook) record(op, owner string, t0 int64, cmd redis.Cmder) {
	e := chaos.Event{Kind: chaos.Cmd, T0: t0, T: chaos.Now(), Proc: h.proc, Owner: owner, Note: op}
	if c, ok := cmd.(*redis.Cmd); ok && c.Err() == nil {
		switch v := c.Val().(type) {
		case int64: // releases and renewals answer 1; the acquire fast path, the fence
			e.OK = v == 1 || (op == "acquire" && v > 0)
			if op == "release-hold" && e.OK {
				e.Note = "release" // the release fast path: the last hold, nobody waiting
			}
		case []any:
			code, _ := v[0].(int64)
			e.OK = code == 1 || code == 2
			if op == "release-hold" && e.OK {
				e.Note = "release" // the last hold: the lock is released or handed over
			}
		}
	} else if cmd.Err() != nil {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			return // the driver sends EVAL next; that one is recorded
		}
		e.Err = cmd.Err().Error()
	}
	h.rec.Add(e)
}

// probe records every key matching pattern (its value when it is a string,
// and its PTTL) every interval until ctx ends.
func probe(ctx context.Context, rdb *redis.Client, rec *chaos.Recorder, pattern string, every time.Duration) {
	for ctx.Err() == nil {
		keys, err := rdb.Keys(ctx, pattern).Result()
		if err == nil {
			for _, k := range keys {
				probeKey(ctx, rdb, rec, k)
			}
		}
		select {
		case <-time.After(every):
		case <-ctx.Done():
		}
	}
}

// probeKey records one key's value and PTTL.
func probeKey(ctx context.Context, rdb *redis.Client, rec *chaos.Recorder, key string) {
	t0 := chaos.Now()
	pipe := rdb.Pipeline()
	typ := pipe.Type(ctx, key)
	pttl := pipe.Do(ctx, "PTTL", key) // raw: go-redis turns -1 and -2 into durations
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return
	}
	ms, err := pttl.Int64()
	if err != nil {
		return
	}
	e := chaos.Event{Kind: chaos.Probe, T0: t0, Key: key, Val: ms}
	if typ.Val() == "string" {
		v, _ := rdb.Get(ctx, key).Result()
		e.Owner = chaosOwner(key, v)
	}
	e.T = chaos.Now()
	rec.Add(e)
}

// redisClientNoRetry returns a client that fails fast while its server is
// down, for probes; it is closed at the end of the test.
func redisClientNoRetry(t testing.TB, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// probeAll records every key matching pattern once.
func probeAll(t testing.TB, rdb *redis.Client, rec *chaos.Recorder, pattern string) {
	ctx := testCtx(t)
	keys, err := rdb.Keys(ctx, pattern).Result()
	if err != nil {
		t.Fatalf("KEYS %s: %v", pattern, err)
	}
	for _, k := range keys {
		probeKey(ctx, rdb, rec, k)
	}
}

// recordFinal records the final value of lock name's unfenced counter.
func recordFinal(t testing.TB, rdb *redis.Client, rec *chaos.Recorder, name string) {
	key := chaosCounterKey(name)
	v, err := rdb.Get(testCtx(t), key).Int64()
	if errors.Is(err, redis.Nil) {
		v, err = 0, nil
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	rec.Add(chaos.Event{Kind: chaos.Final, Key: key, Val: v})
}

// expectNone fails t with the violations found, if any.
func expectNone(t testing.TB, what string, vs []chaos.Violation) {
	t.Helper()
	if len(vs) == 0 {
		return
	}
	var b strings.Builder
	for i, v := range vs {
		if i == 10 {
			fmt.Fprintf(&b, "\n  ... and %d more", len(vs)-10)
			break
		}
		fmt.Fprintf(&b, "\n  %s", v)
		for _, e := range v.Events {
			fmt.Fprintf(&b, "\n      %s", e)
		}
	}
	t.Errorf("%s: %d violations (%v):%s", what, len(vs), chaos.ByCheck(vs), b.String())
}
