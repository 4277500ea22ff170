package conformance

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
)

// Target is a Redis deployment for a NewDriverFunc to connect to.
type Target struct {
	Addrs    []string // one server's address, or every node of a Cluster
	Password string
	Cluster  bool
}

// NewDriverFunc returns a driver.Driver over a new client of the library
// under test, connected to target. It registers the client's Close with
// t.Cleanup and fails t when it cannot connect.
type NewDriverFunc func(t testing.TB, target Target) driver.Driver

// RunDriver runs, as parallel subtests of t, the tests of the driver.Driver
// contract that the Client-level suite (Run) cannot observe: replies in the
// driver's conventions, EVAL only for the calls of a pipeline that met
// NOSCRIPT, WAIT on the script's own connection, Cluster routing, and a
// Subscription that confirms before returning, reconnects with a Reset, and
// stops on Close. Like Run, it needs TestMain to call redistest.Main. It
// takes a few seconds, most of them starting a Cluster.
func RunDriver(t *testing.T, newDriver NewDriverFunc) {
	newDriver = closing(newDriver)
	for _, tc := range driverTests {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newDriver)
		})
	}
}

// closing wraps newDriver so that the driver is closed, as
// dlock.Client.Close does, before the library's client that newDriver
// closes.
func closing(newDriver NewDriverFunc) NewDriverFunc {
	return func(t testing.TB, target Target) driver.Driver {
		d := newDriver(t, target)
		if c, ok := d.(interface{ Close() error }); ok {
			t.Cleanup(func() { _ = c.Close() })
		}
		return d
	}
}

var driverTests = []struct {
	name string
	run  func(t *testing.T, newDriver NewDriverFunc)
}{
	{"RepliesFollowTheConventions", testRepliesFollowTheConventions},
	{"PipelineFallsBackOnlyForNoScript", testPipelineFallsBackOnlyForNoScript},
	{"ConcurrentCallsGetTheirOwnReplies", testConcurrentCallsGetTheirOwnReplies},
	{"WaitRunsOnTheScriptsConnection", testWaitRunsOnTheScriptsConnection},
	{"ClusterRoutesScriptsWaitsAndMessages", testClusterRoutes},
	{"RunReturnsAtTheDeadline", testRunReturnsAtTheDeadline},
	{"SubscribeConfirmsBeforeReturning", testSubscribeConfirmsBeforeReturning},
	{"SubscriptionReconnectsAndResets", testSubscriptionReconnectsAndResets},
	{"UnsubscribeStopsDelivery", testUnsubscribeStopsDelivery},
	{"UnsubscribeGivenUpStillReachesTheServer", testUnsubscribeGivenUpStillReachesTheServer},
	{"CloseStopsTheSubscription", testCloseStopsTheSubscription},
}

func target(srv *redistest.Server) Target {
	return Target{Addrs: []string{srv.Addr()}, Password: srv.Password()}
}

// newScript returns a script the server has never seen, so its first
// EVALSHA meets NOSCRIPT.
func newScript(t testing.TB, body string) *driver.Script {
	return driver.NewScript(fmt.Sprintf("-- %s %d\n%s", t.Name(), time.Now().UnixNano(), body))
}

// key returns a key of the test with its own hash tag.
func key(t testing.TB, tag string) string { return "{" + t.Name() + ":" + tag + "}" }

func testRepliesFollowTheConventions(t *testing.T, newDriver NewDriverFunc) {
	srv := redistest.Shared(t)
	d := newDriver(t, target(srv))
	rdb := inspector(t, srv)
	ctx := testCtx(t)
	if s, ok := d.(driver.Sharded); ok && s.Sharded() {
		t.Errorf("a driver over one server reports driver.Sharded")
	}
	list := key(t, "list")
	own(t, rdb, list)
	rdb.RPush(ctx, list, "a")
	script := newScript(t, `
local k = ARGV[1]
if k == 'int' then return 42 end
if k == 'str' then return 'hello' end
if k == 'status' then return redis.status_reply('FINE') end
if k == 'nil' then return false end
if k == 'array' then return {1, 'two', {3, 'four'}, false, 5} end
if k == 'conflict' then return redis.error_reply('DLOCK_CONFLICT held without expiry') end
if k == 'wrongtype' then return redis.call('GET', KEYS[1]) end
`)
	cases := []struct {
		arg       string
		want      any
		errPrefix string // a *driver.ReplyError whose Msg starts with it
	}{
		{arg: "int", want: int64(42)},
		{arg: "str", want: "hello"},
		{arg: "status", want: "FINE"},
		{arg: "nil", want: nil},
		{arg: "array", want: []any{int64(1), "two", []any{int64(3), "four"}, nil, int64(5)}},
		{arg: "conflict", errPrefix: "DLOCK_CONFLICT held without expiry"},
		{arg: "wrongtype", errPrefix: "WRONGTYPE"},
	}
	check := func(how string, c *driver.Call, arg, errPrefix string, want any) {
		t.Helper()
		if errPrefix != "" {
			var rerr *driver.ReplyError
			if !errors.As(c.Err, &rerr) || !strings.HasPrefix(rerr.Msg, errPrefix) {
				t.Errorf("%s %q: Err = %#v, want a *driver.ReplyError starting with %q", how, arg, c.Err, errPrefix)
			}
			return
		}
		if c.Err != nil || !reflect.DeepEqual(c.Reply, want) {
			t.Errorf("%s %q: Reply, Err = %#v, %v; want %#v", how, arg, c.Reply, c.Err, want)
		}
	}
	var batch []*driver.Call
	for _, tc := range cases {
		c := &driver.Call{Script: script, Keys: []string{list}, Args: []any{tc.arg}}
		d.Run(ctx, c)
		check("alone", c, tc.arg, tc.errPrefix, tc.want)
		batch = append(batch, &driver.Call{Script: script, Keys: []string{list}, Args: []any{tc.arg}})
	}
	d.Run(ctx, batch...)
	for i, tc := range cases {
		check("pipelined", batch[i], tc.arg, tc.errPrefix, tc.want)
	}

	// Integer arguments arrive as their decimal text.
	echo := newScript(t, `return ARGV[1] .. ',' .. ARGV[2]`)
	c := &driver.Call{Script: echo, Keys: []string{list}, Args: []any{7, int64(-1234567890123)}}
	d.Run(ctx, c)
	if c.Err != nil || c.Reply != "7,-1234567890123" {
		t.Errorf("integer arguments: Reply, Err = %#v, %v", c.Reply, c.Err)
	}
}

// testConcurrentCallsGetTheirOwnReplies runs many goroutines' calls at
// once, as a busy Client does, so a driver that batches concurrent callers
// into shared pipelines does so: each call must carry the reply to its own
// keys and arguments, or its own context's error when that context ended
// first, and never another caller's reply.
func testConcurrentCallsGetTheirOwnReplies(t *testing.T, newDriver NewDriverFunc) {
	srv := redistest.Shared(t)
	d := newDriver(t, target(srv))
	ctx := testCtx(t)
	echo := newScript(t, `return KEYS[1] .. '|' .. KEYS[2] .. '|' .. ARGV[1] .. '|' .. ARGV[2]`)
	const goroutines, calls = 32, 200
	var (
		wg        sync.WaitGroup
		ctxErrors atomic.Int64
		errs      = make(chan error, goroutines)
	)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				callCtx, cancel := ctx, context.CancelFunc(func() {})
				switch g % 4 {
				case 1: // a context with a deadline that does not end
					callCtx, cancel = context.WithTimeout(ctx, time.Minute)
				case 2: // a context that is cancelled while the call runs
					callCtx, cancel = context.WithCancel(ctx)
					if i%3 == 0 {
						go cancel()
					}
				}
				k1, k2 := fmt.Sprintf("{%s:%d}:a", t.Name(), g), fmt.Sprintf("{%s:%d}:b", t.Name(), g)
				c1 := &driver.Call{Script: echo, Keys: []string{k1, k2}, Args: []any{g, fmt.Sprint("call-", i)}}
				c2 := &driver.Call{Script: echo, Keys: []string{k2, k1}, Args: []any{int64(i), "second"}}
				batch := []*driver.Call{c1}
				if i%2 == 1 {
					batch = append(batch, c2)
				}
				d.Run(callCtx, batch...)
				ended := callCtx.Err()
				cancel()
				wants := []string{fmt.Sprintf("%s|%s|%d|call-%d", k1, k2, g, i), fmt.Sprintf("%s|%s|%d|second", k2, k1, i)}
				for j, c := range batch {
					switch {
					case c.Err == nil && c.Reply == wants[j]:
					case c.Err != nil && ended != nil && errors.Is(c.Err, ended):
						ctxErrors.Add(1)
					default:
						errs <- fmt.Errorf("goroutine %d, call %d.%d: Reply, Err = %#v, %v; want %q (context error: %v)", g, i, j, c.Reply, c.Err, wants[j], ended)
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d calls ended with their context's error", ctxErrors.Load())
}

// testPipelineFallsBackOnlyForNoScript sends a pipeline whose middle call
// uses a script the server does not have: only that call may be sent again
// with EVAL (the scripts are not idempotent), and every reply must land in
// its own Call.
func testPipelineFallsBackOnlyForNoScript(t *testing.T, newDriver NewDriverFunc) {
	srv := redistest.Start(t) // SCRIPT FLUSH would slow the shared server's other users
	d := newDriver(t, target(srv))
	rdb := inspector(t, srv)
	ctx := testCtx(t)
	known := newScript(t, `return redis.call('INCR', KEYS[1])`)
	unknown := newScript(t, `return redis.call('INCR', KEYS[1]) + 100`)
	warmup := &driver.Call{Script: known, Keys: []string{key(t, "warmup")}}
	d.Run(ctx, warmup)
	if warmup.Err != nil {
		t.Fatalf("warm-up: %v", warmup.Err)
	}

	round := func(name string) {
		t.Helper()
		var keys []string
		var calls []*driver.Call
		for i, s := range []*driver.Script{known, unknown, known} {
			k := key(t, name+strconv.Itoa(i))
			keys = append(keys, k)
			calls = append(calls, &driver.Call{Script: s, Keys: []string{k}})
		}
		d.Run(ctx, calls...)
		for i, want := range []int64{1, 101, 1} {
			if calls[i].Err != nil || calls[i].Reply != want {
				t.Errorf("%s: call %d: Reply, Err = %#v, %v; want %d", name, i, calls[i].Reply, calls[i].Err, want)
			}
			if n := rdb.Get(ctx, keys[i]).Val(); n != "1" {
				t.Errorf("%s: call %d ran %s times, want once", name, i, n)
			}
		}
	}
	round("unknown-in-the-middle-")
	srv.FlushScripts(t)
	round("all-flushed-")
}

// testWaitRunsOnTheScriptsConnection pauses the replica: WAIT on the
// connection that wrote must then time out with 0 acknowledgements, whereas
// WAIT on a connection without writes of its own would count the replica
// at once.
func testWaitRunsOnTheScriptsConnection(t *testing.T, newDriver NewDriverFunc) {
	rep := redistest.StartReplicated(t, 1)
	replica := rep.Replicas[0]
	d := newDriver(t, target(rep.Master))
	ctx := testCtx(t)
	set := newScript(t, `redis.call('SET', KEYS[1], ARGV[1]) return 1`)
	incr := newScript(t, `return redis.call('INCR', KEYS[1])`)
	k := key(t, "k")

	c := &driver.Call{Script: set, Keys: []string{k}, Args: []any{"v1"}, Replicas: 1, ReplicaTimeout: 5 * time.Second}
	d.Run(ctx, c) // NOSCRIPT first: the EVAL needs its WAIT too
	if c.Err != nil || c.Reply != int64(1) || c.Acked != 1 {
		t.Fatalf("replicated write: Reply, Acked, Err = %#v, %d, %v; want 1, 1, nil", c.Reply, c.Acked, c.Err)
	}
	if v := replica.Do(t, "GET", k); v != "v1" {
		t.Errorf("the replica has %v right after WAIT acknowledged the write, want v1", v)
	}

	replica.Pause()
	defer replica.Resume()
	const timeout = 300 * time.Millisecond
	waited := &driver.Call{Script: set, Keys: []string{k}, Args: []any{"v2"}, Replicas: 1, ReplicaTimeout: timeout}
	plain := &driver.Call{Script: incr, Keys: []string{key(t, "plain")}}
	start := time.Now()
	d.Run(ctx, waited, plain)
	elapsed := time.Since(start)
	if waited.Err != nil || waited.Reply != int64(1) || waited.Acked != 0 {
		t.Errorf("write with the replica paused: Reply, Acked, Err = %#v, %d, %v; want 1, 0, nil", waited.Reply, waited.Acked, waited.Err)
	}
	if elapsed < timeout*4/5 {
		t.Errorf("WAIT returned after %v, before its %v timeout: it did not wait for this connection's write", elapsed, timeout)
	}
	if plain.Err != nil || plain.Reply != int64(1) {
		t.Errorf("plain call next to a replicated one: Reply, Err = %#v, %v", plain.Reply, plain.Err)
	}
	replica.Resume()

	again := &driver.Call{Script: set, Keys: []string{k}, Args: []any{"v3"}, Replicas: 1, ReplicaTimeout: 5 * time.Second}
	d.Run(ctx, again)
	if again.Err != nil || again.Acked != 1 {
		t.Errorf("write after Resume: Acked, Err = %d, %v; want 1, nil", again.Acked, again.Err)
	}
}
