package dlock_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// blockingHandler is a slog.Handler that keeps every record and holds the
// first record whose message is blockOn until release is closed: a handler
// writing to a stalled sink.
type blockingHandler struct {
	mu      sync.Mutex
	records []slog.Record
	blockOn string
	blocked bool
	entered chan struct{}
	release chan struct{}
}

func (h *blockingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *blockingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *blockingHandler) WithGroup(string) slog.Handler            { return h }

func (h *blockingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.records = append(h.records, r.Clone())
	first := r.Message == h.blockOn && !h.blocked
	h.blocked = h.blocked || first
	h.mu.Unlock()
	if first {
		close(h.entered)
		<-h.release
	}
	return nil
}

func (h *blockingHandler) find(msg string) (slog.Record, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if r.Message == msg {
			return r, true
		}
	}
	return slog.Record{}, false
}

// TestLossIsLoggedOutsideTheWatchdogLock loses a lease while the log
// handler stalls on the record of the loss: the record names the lock, its
// kind, token and reason, and the Client's other locks carry on meanwhile.
func TestLossIsLoggedOutsideTheWatchdogLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	h := &blockingHandler{blockOn: "dlock: lock lost", entered: make(chan struct{}), release: make(chan struct{})}
	c := newClient(t, srv, dlock.WithLogger(slog.New(h)), dlock.WithTTL(time.Second))
	var once sync.Once
	unblock := func() { once.Do(func() { close(h.release) }) }
	t.Cleanup(unblock) // runs before the Client's Close, which waits for the renewal that logs
	ctx := testCtx(t)
	name := t.Name()

	l := mustLock(t, c, name)
	srv.Client(t).Del(ctx, lockKey(name))
	select {
	case <-h.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the loss was not logged")
	}

	done := make(chan error, 1)
	go func() {
		other, err := c.Mutex(name + ":other").TryLock(ctx)
		if err == nil {
			err = other.Unlock(ctx)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("TryLock and Unlock of another lock stalled behind the log handler")
	}
	unblock()
	waitDone(t, l, 5*time.Second)

	r, _ := h.find("dlock: lock lost")
	attrs := map[string]slog.Value{}
	r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value; return true })
	if r.Level != slog.LevelWarn || attrs["lock"].String() != name || attrs["kind"].String() != "mutex" ||
		attrs["token"].Kind() != slog.KindInt64 || attrs["token"].Int64() != l.Token() || attrs["reason"].String() == "" {
		t.Errorf("loss record: level %v, attributes %v", r.Level, attrs)
	}
}

// A Redlock over an even number of nodes is accepted, with a warning: the
// extra node adds no tolerance of failures.
func TestRedlockOverAnEvenNumberOfNodesWarns(t *testing.T) {
	servers := redistest.StartNodes(t, 2)
	h := &blockingHandler{entered: make(chan struct{}), release: make(chan struct{})}
	newRedlock(t, addrsOf(servers), dlock.WithLogger(slog.New(h)))
	r, ok := h.find("dlock: a Redlock over an even number of nodes survives no more node failures than one over a node fewer; use an odd number (3 or 5)")
	if !ok {
		t.Fatal("no warning for a Redlock over 2 nodes")
	}
	attrs := map[string]int64{}
	r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.Int64(); return true })
	if attrs["nodes"] != 2 || attrs["quorum"] != 2 || attrs["failures_tolerated"] != 0 {
		t.Errorf("warning's attributes %v, want nodes 2, quorum 2, failures_tolerated 0", attrs)
	}

	odd := &blockingHandler{entered: make(chan struct{}), release: make(chan struct{})}
	newRedlock(t, addrsOf(servers[:1]), dlock.WithLogger(slog.New(odd)))
	if _, warned := odd.find("dlock: a Redlock over an even number of nodes survives no more node failures than one over a node fewer; use an odd number (3 or 5)"); warned {
		t.Error("a Redlock over 1 node warned of an even number")
	}
}
