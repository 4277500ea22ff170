package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

const (
	// readyTimeout bounds the wait for a started server to answer PING.
	readyTimeout = 10 * time.Second
	// wrappedReadyTimeout is readyTimeout under a wrapper (WithWrapper):
	// valgrind takes seconds to start a server.
	wrappedReadyTimeout = 60 * time.Second
	// stopTimeout bounds a graceful Stop before it falls back to SIGKILL.
	stopTimeout = 5 * time.Second
	// portAttempts is how often a new server tries another free port when
	// a parallel test binary took the one it was given.
	portAttempts = 5
	// restartWindow is how long Restart keeps trying to get its old port back.
	restartWindow = 3 * time.Second
	// logTailLines is how much of a server's log failure messages include.
	logTailLines = 25
)

// errPortTaken means another process got the port first.
var errPortTaken = errors.New("port already in use")

// Server is one redis-server process (a master, replica, cluster node or
// sentinel) on 127.0.0.1 with its own directory. Its methods are safe for
// concurrent use. The process is stopped by the cleanup of the test that
// started it; nothing else needs to be closed.
type Server struct {
	dir      string
	password string
	wrapper  []string               // argv that runs redis-server (WithWrapper); none if empty
	argv     func(*Server) []string // arguments for the current port(s)
	ready    func(*Server) error    // optional; runs after every start
	shared   bool                   // the Shared server: no fault injection

	// Set before the Server is handed out and never changed: Restart reuses
	// them.
	port    int
	busPort int // cluster bus port; 0 for non-cluster servers

	mu        sync.Mutex
	proc      *process // the latest process; nil before the first start
	paused    bool
	logOffset [2]int64 // log sizes when the latest process was started
}

// spec says how to run a server.
type spec struct {
	dir      string
	password string
	wrapper  []string               // see Server.wrapper
	cluster  bool                   // needs a cluster bus port as well
	argv     func(*Server) []string // arguments for the server's port(s)
	ready    func(*Server) error    // optional; runs after every start
}

// newServer starts a server in sp.dir, trying a new free port when a
// parallel test binary takes the one it picked. It does not touch any
// testing.TB, so it can run on any goroutine; on error nothing is left
// running.
func newServer(sp spec) (*Server, error) {
	s := &Server{dir: sp.dir, password: sp.password, wrapper: sp.wrapper, argv: sp.argv, ready: sp.ready}
	cluster := sp.cluster
	var err error
	for attempt := 0; attempt < portAttempts; attempt++ {
		if s.port, err = freePort(); err != nil {
			return nil, err
		}
		if cluster {
			if s.busPort, err = freePort(); err != nil {
				return nil, err
			}
		}
		s.mu.Lock()
		err = s.launch()
		s.mu.Unlock()
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// handedOut holds every port freePort has returned in this test binary.
// A server keeps its port for life, Restart included, so a port is never
// given to a second server: a test that kills a server can rely on nothing
// of its own binary answering there afterwards. (The kernel readily hands a
// just-freed port to the next bind, and a parallel test's new server once
// answered in place of a killed one.) Other test binaries can still take
// it; launch detects that for new servers, but not for killed ones.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// freePortAttempts bounds how often freePort asks the kernel again when it
// gets a port already handed out in this binary.
const freePortAttempts = 100

// freePort asks the kernel for a free loopback port that no earlier server
// of this test binary was given. Another process may take it before
// redis-server binds it; launch detects that.
func freePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = make(map[int]bool)
	}
	for i := 0; i < freePortAttempts; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("find a free port: the kernel offered only ports already used by this test binary, %d times", freePortAttempts)
}

// Start starts one redis-server on a free port in a temporary directory,
// waits until it answers PING, and registers a cleanup on tb that stops it
// (and, if the test failed, logs the tail of its log). It fails tb if
// redis-server is not installed or does not come up within 10 s (60 s
// under WithWrapper).
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	cfg := newConfig(opts)
	s, err := newServer(cfg.spec(tb.TempDir()))
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	s.cleanupWith(tb)
	return s
}

// StartNodes starts n independent masters (no replication between them), as
// Redlock needs, each on its own port. They start concurrently.
func StartNodes(tb testing.TB, n int, opts ...Option) []*Server {
	tb.Helper()
	cfg := newConfig(opts)
	return startMany(tb, n, func(i int, dir string) (*Server, error) {
		return newServer(cfg.spec(dir))
	})
}

// startMany runs start n times concurrently, each with its own temporary
// directory, registers cleanups for every server that came up and fails tb if
// any did not.
func startMany(tb testing.TB, n int, start func(i int, dir string) (*Server, error)) []*Server {
	tb.Helper()
	if _, err := redisServer(); err != nil {
		tb.Fatalf("redistest: %v", err) // once, not once per server
	}
	servers := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range servers {
		dir := tb.TempDir()
		wg.Add(1)
		go func(i int, dir string) {
			defer wg.Done()
			servers[i], errs[i] = start(i, dir)
		}(i, dir)
	}
	wg.Wait()
	for _, s := range servers {
		if s != nil {
			s.cleanupWith(tb)
		}
	}
	if err := errors.Join(errs...); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	return servers
}

// cleanupWith makes tb's cleanup stop s and, when the test failed, log the
// end of its log, which is otherwise deleted with the temporary directory.
func (s *Server) cleanupWith(tb testing.TB) {
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("redistest: last lines of the log of %s (%s):\n%s", s.Addr(), s.dir, s.logTail())
		}
		s.stop()
	})
}

// launch starts the process on s.port and waits until it answers PING.
// s.mu must be held.
func (s *Server) launch() error {
	path, err := redisServer()
	if err != nil {
		return err
	}
	s.logOffset = [2]int64{fileSize(s.logPath()), fileSize(s.stdoutPath())}
	argv := append([]string{path}, s.argv(s)...)
	if len(s.wrapper) > 0 {
		argv = append(append([]string(nil), s.wrapper...), argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = s.dir
	p, err := spawn(cmd, s.stdoutPath())
	if err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	if err := s.waitReady(p); err != nil {
		p.kill()
		return err
	}
	if s.ready != nil {
		if err := s.ready(s); err != nil {
			p.kill()
			return fmt.Errorf("%s: %w", s.Addr(), err)
		}
	}
	s.proc = p
	s.paused = false
	return nil
}

// waitReady polls with a short backoff until the process answers PING and
// reports its own PID, so a server of another test binary that took the port
// is never mistaken for ours.
func (s *Server) waitReady(p *process) error {
	timeout := readyTimeout
	if len(s.wrapper) > 0 {
		timeout = wrappedReadyTimeout
	}
	deadline := time.Now().Add(timeout)
	delay := time.Millisecond
	for {
		// Check for an early exit first: if something else holds the port and
		// accepts connections without answering, PING would only time out.
		if p.exited() {
			if strings.Contains(s.newLog(), "Address already in use") {
				return fmt.Errorf("%s: %w", s.Addr(), errPortTaken)
			}
			return fmt.Errorf("redis-server on %s exited during startup; last log lines:\n%s", s.Addr(), s.logTail())
		}
		err := s.ping(p.pid())
		if err == nil || errors.Is(err, errPortTaken) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer PING within %v (%v); last log lines:\n%s",
				s.Addr(), timeout, err, s.logTail())
		}
		t := time.NewTimer(delay)
		select {
		case <-p.done:
		case <-t.C:
		}
		t.Stop()
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// ping checks that the server answers PING and is the process pid.
func (s *Server) ping(pid int) error {
	// Short: a server that is up answers in microseconds, and a timeout
	// only means another round.
	c, err := dialCtl(s.Addr(), s.password, 250*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.close()
	if v, err := c.do("PING"); err != nil || v != "PONG" {
		return fmt.Errorf("PING: %v %v", v, err)
	}
	v, err := c.do("INFO", "server")
	if err != nil {
		return err
	}
	info, _ := v.(string)
	if got := infoField(info, "process_id"); got != strconv.Itoa(pid) {
		return fmt.Errorf("%s answered by process %s, not ours (%d): %w", s.Addr(), got, pid, errPortTaken)
	}
	return nil
}

// kill sends SIGKILL and waits until the process is reaped.
func (p *process) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Addr returns "127.0.0.1:PORT".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the TCP port, which stays the same across Restart.
func (s *Server) Port() int { return s.port }

// PID returns the process ID of the latest process (which may have exited).
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.pid()
}

// Dir returns the server's working directory (log, AOF, nodes.conf). It is
// removed when the test ends.
func (s *Server) Dir() string { return s.dir }

// Password returns the requirepass set with WithPassword, or "".
func (s *Server) Password() string { return s.password }

// URL returns "redis://127.0.0.1:PORT", with the password if one is set, in
// the form redis.ParseURL accepts.
func (s *Server) URL() string {
	u := url.URL{Scheme: "redis", Host: s.Addr()}
	if s.password != "" {
		u.User = url.UserPassword("", s.password)
	}
	return u.String()
}

// Options returns fresh go-redis options for this server (address and
// password), for tests that need to tune timeouts. The caller must Close the
// client it makes from them.
func (s *Server) Options() *redis.Options {
	return &redis.Options{Addr: s.Addr(), Password: s.password}
}

// Client returns a new go-redis client with its own connection pool, as a
// separate process would have, with go-redis's default options. It is closed
// by tb's cleanup.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	rdb := redis.NewClient(s.Options())
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// adminOptions are the options of the harness's own throwaway clients: one
// connection, no retries, no handshake extras that Redis 7.0 rejects anyway.
func adminOptions(addr, password string) *redis.Options {
	return &redis.Options{
		Addr:                     addr,
		Password:                 password,
		PoolSize:                 1,
		MaxRetries:               -1,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// Do runs one command on a throwaway connection and returns its reply as
// go-redis's Do would (nil for redis.Nil). It fails tb on any other error,
// including a timeout after 5 s.
func (s *Server) Do(tb testing.TB, args ...any) any {
	tb.Helper()
	rdb := redis.NewClient(adminOptions(s.Addr(), s.password))
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), ctlTimeout)
	defer cancel()
	v, err := rdb.Do(ctx, args...).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		tb.Fatalf("redistest: %s %v: %v", s.Addr(), args, err)
	}
	return v
}

// FlushScripts runs SCRIPT FLUSH, so the next EVALSHA answers NOSCRIPT, as it
// does after a restart or failover.
func (s *Server) FlushScripts(tb testing.TB) {
	tb.Helper()
	if _, err := ctl(s.Addr(), s.password, "SCRIPT", "FLUSH"); err != nil {
		tb.Fatalf("redistest: SCRIPT FLUSH on %s: %v", s.Addr(), err)
	}
}
