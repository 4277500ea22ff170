//go:build linux

package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/chaos"
	"github.com/dlock-go/dlock/internal/redistest"
)

// foreignValue writes something dlock never wrote at key: a value of
// another type, or a string it would not have left there.
type foreignValue struct {
	name  string
	typ   string // the Redis type it creates
	write func(ctx context.Context, rdb *redis.Client, key string)
}

var foreignValues = []foreignValue{
	{"list", "list", func(ctx context.Context, rdb *redis.Client, k string) { rdb.RPush(ctx, k, "x") }},
	{"set", "set", func(ctx context.Context, rdb *redis.Client, k string) { rdb.SAdd(ctx, k, "x") }},
	{"hash", "hash", func(ctx context.Context, rdb *redis.Client, k string) { rdb.HSet(ctx, k, "f", "x") }},
	{"zset", "zset", func(ctx context.Context, rdb *redis.Client, k string) {
		rdb.ZAdd(ctx, k, redis.Z{Score: 1, Member: "x"})
	}},
	{"string without TTL", "string", func(ctx context.Context, rdb *redis.Client, k string) { rdb.Set(ctx, k, "12345", 0) }},
	{"string, not a number", "string", func(ctx context.Context, rdb *redis.Client, k string) { rdb.Set(ctx, k, "not-a-number", time.Hour) }},
}

// primitiveKeys is one kind of lock: its keys (suffixes of the lock key and
// the type dlock keeps there; "number" is a numeric string) and the
// operations to try with a foreign value in one of them.
type primitiveKeys struct {
	kind string
	keys []struct{ suffix, typ string }
	ops  map[string]func(ctx context.Context, c *dlock.Client, name string) error
}

func keysOf(pairs ...string) []struct{ suffix, typ string } {
	var out []struct{ suffix, typ string }
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, struct{ suffix, typ string }{pairs[i], pairs[i+1]})
	}
	return out
}

// unlocked returns a function that unlocks a lease just granted and passes
// the error on: unlocked(ctx)(m.TryLock(ctx)).
func unlocked(ctx context.Context) func(*dlock.Lease, error) error {
	return func(l *dlock.Lease, err error) error {
		if err == nil {
			_ = l.Unlock(ctx)
		}
		return err
	}
}

var primitives = []primitiveKeys{
	{"Mutex", keysOf("", "lock", ":fence", "number", ":q", "zset", ":w", "hash"), map[string]func(context.Context, *dlock.Client, string) error{
		"TryLock": func(ctx context.Context, c *dlock.Client, n string) error {
			return unlocked(ctx)(c.Mutex(n).TryLock(ctx))
		},
		"Lock": func(ctx context.Context, c *dlock.Client, n string) error {
			ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			return unlocked(ctx)(c.Mutex(n).Lock(ctx))
		},
	}},
	{"ReentrantMutex", keysOf(":re", "lock", ":re:fence", "number", ":re:q", "zset", ":re:w", "hash", ":re:holds", "set"), map[string]func(context.Context, *dlock.Client, string) error{
		"TryLock": func(ctx context.Context, c *dlock.Client, n string) error {
			ctx = dlock.WithOwner(ctx, "owner")
			return unlocked(ctx)(c.ReentrantMutex(n).TryLock(ctx))
		},
	}},
	{"RWMutex", keysOf(":rw", "zset", ":rw:tok", "hash", ":rw:fence", "number", ":rw:q", "zset", ":rw:w", "hash"), map[string]func(context.Context, *dlock.Client, string) error{
		"TryLock": func(ctx context.Context, c *dlock.Client, n string) error {
			return unlocked(ctx)(c.RWMutex(n).TryLock(ctx))
		},
		"TryRLock": func(ctx context.Context, c *dlock.Client, n string) error {
			return unlocked(ctx)(c.RWMutex(n).TryRLock(ctx))
		},
	}},
	{"Semaphore", keysOf(":sem", "zset", ":sem:n", "hash", ":sem:limit", "number", ":sem:fence", "number", ":sem:q", "zset", ":sem:w", "hash", ":sem:calls", "zset"), map[string]func(context.Context, *dlock.Client, string) error{
		"TryAcquire": func(ctx context.Context, c *dlock.Client, n string) error {
			p, err := c.Semaphore(n, 2).TryAcquire(ctx, 1)
			if err == nil {
				_ = p.Release(ctx)
			}
			return err
		},
		"SetPermits": func(ctx context.Context, c *dlock.Client, n string) error {
			return c.Semaphore(n, 2).SetPermits(ctx, 3)
		},
		"AddPermits": func(ctx context.Context, c *dlock.Client, n string) error {
			_, err := c.Semaphore(n, 2).AddPermits(ctx, 1)
			return err
		},
		"ReleaseN": func(ctx context.Context, c *dlock.Client, n string) error {
			p, err := c.Semaphore(n, 2).TryAcquire(ctx, 2)
			if err != nil {
				return err
			}
			defer p.Release(ctx)
			return p.ReleaseN(ctx, 1)
		},
		"Available": func(ctx context.Context, c *dlock.Client, n string) error {
			_, err := c.Semaphore(n, 2).Available(ctx)
			return err
		},
	}},
	{"Latch", keysOf(":latch", "number"), map[string]func(context.Context, *dlock.Client, string) error{
		"TrySetCount": func(ctx context.Context, c *dlock.Client, n string) error {
			_, err := c.Latch(n).TrySetCount(ctx, 3)
			return err
		},
		"CountDown": func(ctx context.Context, c *dlock.Client, n string) error { return c.Latch(n).CountDown(ctx) },
		"Count": func(ctx context.Context, c *dlock.Client, n string) error {
			_, err := c.Latch(n).Count(ctx)
			return err
		},
	}},
}

// foreign reports whether v at a key of type typ is something dlock would
// not have written there.
func foreign(v foreignValue, typ string) bool {
	switch typ {
	case "lock": // a string with a TTL; without one, it is foreign
		return v.typ != "string" || v.name == "string without TTL"
	case "number":
		return v.typ != "string" || v.name == "string, not a number"
	}
	return v.typ != typ
}

// snapshot is the DUMP and PTTL of each key, "" for an absent one.
func snapshot(ctx context.Context, rdb *redis.Client, keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		dump, err := rdb.Dump(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		pttl := rdb.PTTL(ctx, k).Val()
		out[i] = fmt.Sprintf("%x ttl=%v", dump, pttl > 0) // the TTL only as present or not: it ticks
	}
	return out
}

// TestChaosForeignKeys puts a value dlock never wrote in each key of each
// kind of lock, in turn, and runs every operation: each must fail with
// ErrKeyConflict and change nothing at all, or succeed without touching the
// foreign key. Nothing may panic, hang, or return another error.
func TestChaosForeignKeys(t *testing.T) {
	chaosParallel(t)
	started := time.Now()
	seed := chaos.Seed(t)
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := newClient(t, srv, dlock.WithTTL(time.Second))
	ctx := testCtx(t)
	type tally struct{ conflict, untouched, bad int }
	results := map[string]*tally{}
	trial := 0
	for _, p := range primitives {
		res := &tally{}
		results[p.kind] = res
		t.Run(p.kind, func(t *testing.T) {
			var ops []string
			for op := range p.ops {
				ops = append(ops, op)
			}
			sort.Strings(ops)
			for _, key := range p.keys {
				for _, v := range foreignValues {
					if !foreign(v, key.typ) {
						continue
					}
					for _, op := range ops {
						trial++
						name := fmt.Sprintf("%s-%d", t.Name(), trial)
						all := make([]string, len(p.keys))
						for i, k := range p.keys {
							all[i] = lockKey(name) + k.suffix
						}
						target := lockKey(name) + key.suffix
						v.write(ctx, rdb, target)
						before := snapshot(ctx, rdb, all)
						err := p.ops[op](ctx, c, name)
						after := snapshot(ctx, rdb, all)
						what := fmt.Sprintf("%s.%s with a %s at %s", p.kind, op, v.name, target)
						switch {
						case errors.Is(err, dlock.ErrKeyConflict):
							if !equalStrings(before, after) {
								res.bad++
								t.Errorf("%s: ErrKeyConflict, but the keys changed:\nbefore %q\nafter  %q", what, before, after)
							} else {
								res.conflict++
							}
						case err == nil || errors.Is(err, dlock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded):
							i := indexOf(all, target)
							if before[i] != after[i] {
								res.bad++
								t.Errorf("%s: %v, and the foreign key changed:\nbefore %q\nafter  %q", what, err, before[i], after[i])
							} else {
								res.untouched++
							}
						default:
							res.bad++
							t.Errorf("%s: %v, want ErrKeyConflict or success that leaves it alone", what, err)
						}
						rdb.Del(ctx, all...)
					}
				}
			}
		})
	}

	s := chaos.NewSection("foreign-keys")
	s.Printf("%s", seedLine(t, seed, started))
	var rows [][]string
	for _, p := range primitives {
		r := results[p.kind]
		rows = append(rows, []string{p.kind, strconv.Itoa(r.conflict + r.untouched + r.bad), strconv.Itoa(r.conflict), strconv.Itoa(r.untouched), strconv.Itoa(r.bad)})
	}
	s.Table([]string{"primitive", "key × foreign value × operation", "ErrKeyConflict, nothing changed", "succeeded, foreign key untouched", "anything else"}, rows)
	s.Printf("\nForeign values: %s.\n", foreignNames())
	publish(t, s)
}

func foreignNames() string {
	var names []string
	for _, v := range foreignValues {
		names = append(names, v.name)
	}
	return strings.Join(names, ", ")
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// TestChaosInvalidArguments checks every kind of invalid argument on a
// client that counts what it sends: each must return ErrInvalidArgument and
// send nothing. FuzzArguments (fuzz_test.go) explores the same space.
func TestChaosInvalidArguments(t *testing.T) {
	chaosParallel(t)
	srv := redistest.Start(t)
	rdb, counter := countingClient(t, srv)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := dlock.WithOwner(testCtx(t), "owner")
	long := strings.Repeat("n", dlock.MaxNameLen+1)
	lockErr := unlocked(ctx)
	cases := map[string]func() error{
		"empty name":            func() error { return lockErr(c.Mutex("").TryLock(ctx)) },
		"name too long":         func() error { return lockErr(c.Mutex(long).TryLock(ctx)) },
		"name starting with }":  func() error { return lockErr(c.Mutex("}x").Lock(ctx)) },
		"TTL zero":              func() error { return lockErr(c.Mutex("x", dlock.WithTTL(0)).TryLock(ctx)) },
		"TTL negative":          func() error { return lockErr(c.Mutex("x", dlock.WithTTL(-time.Second)).TryLock(ctx)) },
		"TTL below MinTTL":      func() error { return lockErr(c.Mutex("x", dlock.WithTTL(dlock.MinTTL-1)).TryLock(ctx)) },
		"TTL above MaxTTL":      func() error { return lockErr(c.Mutex("x", dlock.WithTTL(dlock.MaxTTL+1)).TryLock(ctx)) },
		"prefix with {":         func() error { return lockErr(c.Mutex("x", dlock.WithKeyPrefix("a{")).TryLock(ctx)) },
		"waiter lease too long": func() error { return lockErr(c.Mutex("x", dlock.WithWaiterLease(2*time.Minute)).Lock(ctx)) },
		"spin delays reversed": func() error {
			return lockErr(c.Mutex("x", dlock.WithWaitStrategy(dlock.SpinWait(time.Second, time.Millisecond))).Lock(ctx))
		},
		"max hold negative":    func() error { return lockErr(c.Mutex("x", dlock.WithMaxHold(-1)).TryLock(ctx)) },
		"owner info too long":  func() error { return lockErr(c.Mutex("x", dlock.WithOwnerInfo(long)).TryLock(ctx)) },
		"release timeout zero": func() error { return lockErr(c.Mutex("x", dlock.WithReleaseTimeout(0)).TryLock(ctx)) },
		"nil option":           func() error { return lockErr(c.Mutex("x", nil).TryLock(ctx)) },
		"nil logger":           func() error { return lockErr(c.Mutex("x", dlock.WithLogger(nil)).TryLock(ctx)) },
		"Redlock-only option":  func() error { return lockErr(c.Mutex("x", dlock.WithNodeTimeout(time.Second)).TryLock(ctx)) },
		"Do with nil function": func() error { return c.Do(ctx, "x", nil) },
		"reentrant without owner": func() error {
			return lockErr(c.ReentrantMutex("x").TryLock(testCtx(t)))
		},
		"RWMutex empty name":  func() error { return lockErr(c.RWMutex("").TryRLock(ctx)) },
		"MultiLock no names":  func() error { return lockErr(c.MultiLock().TryLock(ctx)) },
		"MultiLock bad name":  func() error { return lockErr(c.MultiLock("a", "").TryLock(ctx)) },
		"semaphore 0 permits": func() error { _, err := c.Semaphore("x", 0).TryAcquire(ctx, 1); return err },
		"semaphore acquire 0": func() error { _, err := c.Semaphore("x", 2).TryAcquire(ctx, 0); return err },
		"SetPermits 0":        func() error { return c.Semaphore("x", 2).SetPermits(ctx, 0) },
		"AddPermits too many": func() error { _, err := c.Semaphore("x", 2).AddPermits(ctx, dlock.MaxPermits); return err },
		"latch count 0":       func() error { _, err := c.Latch("x").TrySetCount(ctx, 0); return err },
		"latch empty name":    func() error { return c.Latch("").CountDown(ctx) },
	}
	var names []string
	for n := range cases {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		before := counter.n.Load()
		err := cases[n]()
		sent := counter.n.Load() - before
		if !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", n, err)
		}
		if sent != 0 {
			t.Errorf("%s: %d commands sent before the error", n, sent)
		}
	}
}
