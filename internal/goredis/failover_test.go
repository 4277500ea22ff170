package goredis

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redistest"
)

// keyOn returns a key with prefix whose slot master is m and whose slot is
// not avoid.
func keyOn(t *testing.T, cl *redistest.Cluster, m *redistest.Server, prefix string, avoid int) string {
	for i := 0; i < 10000; i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		s := redistest.KeySlot(k)
		if s != avoid && cl.MasterForSlot(t, s) == m {
			return k
		}
	}
	t.Fatal("no key")
	return ""
}

// A call whose reply was lost after it ran (read timeout; go-redis writes
// it again) and whose resending met TRYAGAIN (the slot's migration began
// meanwhile) is sent again by retryTryAgain once the migration ends, and
// runs a second time. Its Resent must say so: the root package reads a
// release sent twice that found the lock gone as a release, so
// retryTryAgain keeps what the sendings before the TRYAGAIN said.
func TestResentKeptAcrossATryAgainResend(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	tag := "{audit}"
	slot := redistest.KeySlot(tag)
	src := cl.MasterForSlot(t, slot)
	var dst *redistest.Server
	for _, m := range cl.Masters(t) {
		if m != src {
			dst = m
			break
		}
	}
	proxy := redistest.StartProxy(t, src.Addr())
	cc := clientThroughProxy(cl, src, proxy)
	t.Cleanup(func() { _ = cc.Close() })
	cancel := cancelMigrationOnTryAgain(t, cc, src, dst, slot)
	d := New(cc)
	defer d.Close()
	ctx := context.Background()

	cnt, miss := tag+"cnt", tag+"miss"
	other := keyOn(t, cl, src, "other", slot)
	onDst := keyOn(t, cl, dst, "dst", -1)
	for _, k := range []string{other, onDst, cnt} {
		w := &driver.Call{Script: count, Keys: []string{k}, Args: []any{"warm"}}
		if d.Run(ctx, w); w.Err != nil {
			t.Fatalf("warm-up: %v", w.Err)
		}
	}
	src.Do(t, "SET", cnt, "0")

	proxy.HoldOpenReplies(true)
	oc := &driver.Call{Script: count, Keys: []string{other}, Args: []any{"other"}}
	mine := &driver.Call{Script: count, Keys: []string{cnt, miss}, Args: []any{"mine"}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Run(ctx, oc, mine)
	}()
	// mine runs on the source; its reply is held.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if v, _ := src.Do(t, "GET", cnt).(string); v == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("mine never ran")
		}
		time.Sleep(time.Millisecond)
	}
	cancel.armed.Store(true)
	cl.StartMigration(t, slot, dst)
	select {
	case <-cancel.done:
	case <-time.After(10 * time.Second):
		t.Fatal("no TRYAGAIN")
	}
	proxy.HoldOpenReplies(false)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return")
	}
	n, _ := src.Do(t, "GET", cnt).(string)
	t.Logf("mine: reply %v err %v Resent %v; the script ran %s times", mine.Reply, mine.Err, mine.Resent, n)
	if mine.Err != nil || n != "2" {
		t.Fatalf("the script did not run twice with a reply (the test's premise): counter %s, error %v", n, mine.Err)
	}
	if !mine.Resent {
		t.Errorf("the script ran twice (counter %s) but Resent is false", n)
	}
}

// clientThroughProxy is a client of cl that reaches src through proxy,
// with a read timeout of a second.
func clientThroughProxy(cl *redistest.Cluster, src *redistest.Server, proxy *redistest.Proxy) *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:       cl.Addrs(),
		ReadTimeout: time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == src.Addr() {
				addr = proxy.Addr()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	})
}

// migrationCancel cancels a slot's migration, as an operator would, when
// cc's first reply from its source is TRYAGAIN once armed; done is closed
// then.
type migrationCancel struct {
	armed atomic.Bool
	done  chan struct{}
}

func cancelMigrationOnTryAgain(t *testing.T, cc *redis.ClusterClient, src, dst *redistest.Server, slot int) *migrationCancel {
	m := &migrationCancel{done: make(chan struct{})}
	cc.OnNewNode(func(rdb *redis.Client) {
		addr := rdb.Options().Addr
		rdb.AddHook(pipelineDone(func(cmds []redis.Cmder) {
			if !m.armed.Load() || addr != src.Addr() {
				return
			}
			for _, c := range cmds {
				if isTryAgain(normalizeErr(c.Err())) && m.armed.CompareAndSwap(true, false) {
					src.Do(t, "CLUSTER", "SETSLOT", slot, "STABLE")
					dst.Do(t, "CLUSTER", "SETSLOT", slot, "STABLE")
					close(m.done)
				}
			}
		}))
	})
	return m
}

// pipelineDone is a go-redis hook that calls itself with each pipeline's
// commands once the pipeline has returned.
type pipelineDone func(cmds []redis.Cmder)

func (f pipelineDone) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (f pipelineDone) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (f pipelineDone) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		f(cmds)
		return err
	}
}

func normalizeErr(err error) error { _, e := normalize(nil, err); return e }

// A caller whose context can be cancelled but has no deadline (it need not
// leave early) sends a shared pipeline itself, on a context of the
// pipeline's own. After a network error a shared pipeline only has the
// slot map reloaded (Lib.Sent's shared) rather than waiting for the
// reload, so the caller's cancellation ends its wait.
func TestSharedPipelineDoesNotWaitForAFailoverResend(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	masters := cl.Masters(t)
	dead, live := masters[0], masters[1]
	deadKey := keyOn(t, cl, dead, "dead", -1)
	liveKey := keyOn(t, cl, live, "live", -1)
	liveProxy := redistest.StartProxy(t, live.Addr())
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(),
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == live.Addr() {
				addr = liveProxy.Addr()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	t.Cleanup(func() { _ = cc.Close() })
	d := New(cc)
	defer d.Close()
	for _, k := range []string{deadKey, liveKey} {
		w := &driver.Call{Script: count, Keys: []string{k}, Args: []any{"w"}}
		if d.Run(context.Background(), w); w.Err != nil {
			t.Fatal(w.Err)
		}
	}
	dead.Kill()
	// A slow call in flight makes the next one join a batch.
	liveProxy.SetLatency(300 * time.Millisecond)
	other := make(chan struct{})
	go func() {
		defer close(other)
		d.Run(context.Background(), &driver.Call{Script: count, Keys: []string{liveKey}, Args: []any{"o"}})
	}()
	for d.kit.InFlight() == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &driver.Call{Script: count, Keys: []string{deadKey}, Args: []any{"mine"}}
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	d.Run(ctx, c)
	took := time.Since(start)
	<-other
	t.Logf("batched call, cancelled after 100ms: returned after %v with %v", took.Round(time.Millisecond), c.Err)
	// Direct, for comparison.
	liveProxy.SetLatency(0)
	ctx2, cancel2 := context.WithCancel(context.Background())
	c2 := &driver.Call{Script: count, Keys: []string{deadKey}, Args: []any{"mine"}}
	time.AfterFunc(100*time.Millisecond, cancel2)
	start = time.Now()
	d.Run(ctx2, c2)
	took2 := time.Since(start)
	t.Logf("direct call, cancelled after 100ms: returned after %v with %v", took2.Round(time.Millisecond), c2.Err)
	if took > 3*time.Second {
		t.Errorf("a batched call cancelled after 100 ms returned after %v", took.Round(time.Millisecond))
	}
	if took2 > 3*time.Second {
		t.Errorf("a direct call cancelled after 100 ms returned after %v", took2.Round(time.Millisecond))
	}
}
