package redistest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

var (
	// mainActive is set while the test binary's tests run under Wrap.
	mainActive atomic.Bool

	sharedMu  sync.Mutex
	sharedSrv *Server
	sharedErr error
	sharedDir string

	// sharedNodes are SharedNodeAddrs's independent servers, with their
	// directories.
	sharedNodes    []*Server
	sharedNodeDirs []string
)

// Shared returns a server started once per test binary and shared by all its
// tests, which saves a start per test for tests that inject no faults. Tests
// must use keys of their own and must not Kill, Pause, Restart or Stop it
// (those panic); the harness stops it after the last test. Shared fails tb
// unless the package's TestMain runs through Main or Wrap, since only they
// stop the server before goleak looks for leaked goroutines.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	if !mainActive.Load() {
		tb.Fatalf("redistest: Shared needs TestMain to call redistest.Main(m) or goleak.VerifyTestMain(redistest.Wrap(m))")
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedSrv == nil && sharedErr == nil {
		sharedSrv, sharedErr = startShared()
	}
	if sharedErr != nil {
		tb.Fatalf("redistest: shared server: %v", sharedErr)
	}
	return sharedSrv
}

// UniqueName returns tb's name with a random suffix: a name for the keys or
// locks of a test of its own on the shared server, apart from those of
// other runs of the same test (go test -count N) and of other test
// binaries using the same server.
func UniqueName(tb testing.TB) string {
	return tb.Name() + "-" + RandomSuffix()
}

// RandomSuffix returns eight random hex digits, to set a test's names or
// key prefixes apart from those of other tests on the shared server.
func RandomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// SharedAddr is Shared for code that has no testing.TB, such as runnable
// examples: it returns the shared server's address, starting it if needed.
// It panics when the server cannot start or TestMain does not run through
// Main or Wrap.
func SharedAddr() string {
	if !mainActive.Load() {
		panic("redistest: SharedAddr needs TestMain to call redistest.Main(m) or goleak.VerifyTestMain(redistest.Wrap(m))")
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedSrv == nil && sharedErr == nil {
		sharedSrv, sharedErr = startShared()
	}
	if sharedErr != nil {
		panic("redistest: shared server: " + sharedErr.Error())
	}
	return sharedSrv.Addr()
}

// SharedNodeAddrs is SharedAddr for n independent servers (no replication
// between them), as runnable examples of Redlock need: it returns their
// addresses, starting those not started yet. The servers are shared by the
// whole test binary like the Shared one (separate from it), and stopped
// with it. It panics when a server cannot start or TestMain does not run
// through Main or Wrap.
func SharedNodeAddrs(n int) []string {
	if !mainActive.Load() {
		panic("redistest: SharedNodeAddrs needs TestMain to call redistest.Main(m) or goleak.VerifyTestMain(redistest.Wrap(m))")
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	for len(sharedNodes) < n {
		s, dir, err := startSharedServer()
		if err != nil {
			panic("redistest: shared node: " + err.Error())
		}
		sharedNodes = append(sharedNodes, s)
		sharedNodeDirs = append(sharedNodeDirs, dir)
	}
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = sharedNodes[i].Addr()
	}
	return addrs
}

func startShared() (*Server, error) {
	s, dir, err := startSharedServer()
	if err != nil {
		return nil, err
	}
	sharedDir = dir
	return s, nil
}

// startSharedServer starts a server marked shared (no fault injection) in a
// new temporary directory.
func startSharedServer() (*Server, string, error) {
	if _, err := redisServer(); err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp("", "redistest-shared-")
	if err != nil {
		return nil, "", err
	}
	cfg := newConfig(nil)
	s, err := newServer(cfg.spec(dir))
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	s.shared = true
	return s, dir, nil
}

// stopShared stops the shared servers, if any were started, and removes
// their directories.
func stopShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedSrv != nil {
		sharedSrv.stop()
		os.RemoveAll(sharedDir)
	}
	sharedSrv, sharedErr, sharedDir = nil, nil, ""
	for i, s := range sharedNodes {
		s.stop()
		os.RemoveAll(sharedNodeDirs[i])
	}
	sharedNodes, sharedNodeDirs = nil, nil
}

// Wrap returns m with a Run that, after the tests, stops the Shared server
// and gives go-redis's background goroutines that outlive Close (a redial
// loop after a killed server, a dial its caller gave up on, a cluster slot
// reload) up to transientWait to end, for composing with goleak or other
// TestMain code:
//
//	func TestMain(m *testing.M) {
//		goleak.VerifyTestMain(redistest.Wrap(m))
//	}
func Wrap(m goleak.TestingM) goleak.TestingM { return wrapped{m} }

type wrapped struct{ m goleak.TestingM }

func (w wrapped) Run() int {
	mainActive.Store(true)
	defer mainActive.Store(false)
	code := w.m.Run()
	stopShared()
	waitTransient(transientWait)
	return code
}

// transient are go-redis goroutines that outlive a client's Close: after
// dial failures (a killed server) the pool redials in the background and
// sleeps 1 s between tries; a dial started for a caller runs its retries to
// the end even when the caller gave up and the pool closed, up to the dial
// timeout (5 s by default; a blackholed server takes all of it); and a
// cluster client's slot reload sleeps 200 ms. They end on their own;
// goleak retries for only about half a second.
var transient = []string{
	"github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial",
	"github.com/redis/go-redis/v9/internal/pool.(*ConnPool).queuedNewConn",
	"github.com/redis/go-redis/v9.(*clusterStateHolder).LazyReload",
}

// transientWait bounds how long Main waits for the transient goroutines: the
// default dial timeout, and a margin for a loaded machine.
const transientWait = 7 * time.Second

// waitTransient waits up to timeout for the transient goroutines to end, so
// that goleak still reports them if they do not (a client never closed).
func waitTransient(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && anyRunning(transient...) {
		time.Sleep(20 * time.Millisecond)
	}
}

// anyRunning reports whether a goroutine's stack names one of fns.
func anyRunning(fns ...string) bool {
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	for _, fn := range fns {
		if strings.Contains(stacks, fn) {
			return true
		}
	}
	return false
}

// Main runs the tests, stops the Shared server, checks for leaked goroutines
// with goleak (taking opts), and exits. A package's whole TestMain can be:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
func Main(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(Wrap(m), opts...)
}
