package redistest

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestUniqueName(t *testing.T) {
	t.Parallel()
	a, b := UniqueName(t), UniqueName(t)
	if a == b {
		t.Errorf("two UniqueNames are both %q", a)
	}
	if !strings.HasPrefix(a, t.Name()+"-") || len(a) != len(t.Name())+9 {
		t.Errorf("UniqueName = %q, want %q and 8 hex digits", a, t.Name()+"-")
	}
}

// TestWaitTransientOutlastsAnAbandonedDial: a command whose caller gives up
// while its connection is still being dialled leaves go-redis dialling on
// (its retries run to the end after Close), and Main must wait for that
// rather than report it as a leak.
func TestWaitTransientOutlastsAnAbandonedDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: every dial is refused
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("PING to a closed port answered")
	}
	_ = rdb.Close()
	dialling := func() bool { return anyRunning("(*ConnPool).queuedNewConn") }
	if !dialling() {
		t.Skip("this go-redis does not dial on after its caller gave up")
	}
	waitTransient(transientWait)
	if dialling() {
		t.Errorf("go-redis still dials %v after Close", transientWait)
	}
}
