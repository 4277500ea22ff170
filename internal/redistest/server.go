package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
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

// Running reports whether the process is alive (paused counts as alive).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}

// Kill sends SIGKILL and waits until the process is reaped, as a crash
// would. Without WithPersistence the data is gone. Killing a stopped server
// is a no-op. No other server of this test binary is ever given the port,
// so clients of a killed server meet refused connections until Restart.
func (s *Server) Kill() {
	s.faultInjection("Kill")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.kill()
	}
	s.paused = false
}

// Pause freezes the server with SIGSTOP and returns once the kernel reports
// it stopped: connections stay open but nothing is answered, like a long GC
// pause or a VM freeze. Stop and the test's cleanup resume it first, so a
// test never leaves a stopped process. It panics if the server is not
// running, which is a bug in the test.
func (s *Server) Pause() {
	s.faultInjection("Pause")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		panic("redistest: Pause: " + s.Addr() + " is not running")
	}
	if err := s.proc.cmd.Process.Signal(sigStop); err != nil {
		panic("redistest: Pause: " + err.Error())
	}
	if err := waitStopped(s.proc.pid(), 5*time.Second); err != nil {
		panic("redistest: Pause: " + err.Error())
	}
	s.paused = true
}

// Resume continues a paused server with SIGCONT. It is a no-op when the
// server is not paused.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resume()
}

func (s *Server) resume() {
	if s.paused && s.proc != nil && !s.proc.exited() {
		_ = s.proc.cmd.Process.Signal(sigCont)
	}
	s.paused = false
}

// Restart kills the server if it is running and starts it again on the same
// port and directory with the same arguments, then waits for PING. Data
// survives only WithPersistence; a cluster node keeps its identity
// (nodes.conf) and a sentinel its rewritten sentinel.conf. It panics, with
// the end of the log, if the server does not come back: Restart has no tb
// to fail, and a harness that cannot restart leaves the test meaningless.
func (s *Server) Restart() {
	s.faultInjection("Restart")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.kill()
	}
	// The old port is usually free at once (Redis sets SO_REUSEADDR), but
	// another test binary may have grabbed it meanwhile: wait for it.
	deadline := time.Now().Add(restartWindow)
	for {
		err := s.launch()
		if err == nil {
			return
		}
		if !errors.Is(err, errPortTaken) || time.Now().After(deadline) {
			panic("redistest: Restart: " + err.Error())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down gracefully (resuming it first if paused) with
// SHUTDOWN NOSAVE NOW, and SIGTERM in case the command did not get through,
// then waits until it is reaped, falling back to SIGKILL after 5 s. The AOF
// is flushed; no RDB is written. Stop is idempotent and is what the test's
// cleanup calls.
func (s *Server) Stop() {
	s.faultInjection("Stop")
	s.stop()
}

func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil || p.exited() {
		return
	}
	if s.paused {
		_ = p.cmd.Process.Signal(sigCont)
		s.paused = false
	}
	// SHUTDOWN acts at once, whereas SIGTERM is only noticed by the next
	// serverCron tick (up to 100 ms at the default hz 10). NOW skips waiting
	// for lagging replicas. The reply is the connection closing.
	if c, err := dialCtl(s.Addr(), s.password, time.Second); err == nil {
		_, _ = c.do("SHUTDOWN", "NOSAVE", "NOW")
		c.close()
	}
	// In case SHUTDOWN did not get through (or was refused): signal too.
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.kill()
	}
}

// faultInjection refuses to break the server that other tests share.
func (s *Server) faultInjection(op string) {
	if s.shared {
		panic("redistest: " + op + " on the Shared server, which other tests use; start your own with redistest.Start")
	}
}

func (s *Server) logPath() string    { return filepath.Join(s.dir, "redis.log") }
func (s *Server) stdoutPath() string { return filepath.Join(s.dir, "stdout.log") }

// newLog returns what the latest process wrote to its log and its output.
func (s *Server) newLog() string {
	var b strings.Builder
	for i, path := range []string{s.logPath(), s.stdoutPath()} {
		data, _ := os.ReadFile(path)
		if off := s.logOffset[i]; off <= int64(len(data)) {
			data = data[off:]
		}
		b.Write(data)
	}
	return b.String()
}

// logTail returns the last lines of the server's log and of its standard
// output (where redis-server reports errors that happen before the log file
// is open, such as a bad argument).
func (s *Server) logTail() string {
	var b strings.Builder
	for _, path := range []string{s.stdoutPath(), s.logPath()} {
		data, err := os.ReadFile(path)
		if err != nil || len(data) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > logTailLines {
			lines = lines[len(lines)-logTailLines:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", path, strings.Join(lines, "\n"))
	}
	if b.Len() == 0 {
		return "(no log output)"
	}
	return b.String()
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// role returns "master", "slave" or "sentinel" as the ROLE command reports it.
func (s *Server) role() (string, error) {
	v, err := ctl(s.Addr(), s.password, "ROLE")
	if err != nil {
		return "", err
	}
	arr, _ := v.([]any)
	if len(arr) == 0 {
		return "", fmt.Errorf("ROLE on %s: unexpected reply %#v", s.Addr(), v)
	}
	r, _ := arr[0].(string)
	return r, nil
}

// info returns one section of INFO.
func (s *Server) info(section string) (string, error) {
	return ctlString(s.Addr(), s.password, "INFO", section)
}

// waitFor polls cond with a short backoff until it returns nil or timeout
// passes, then returns cond's last error.
func waitFor(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	delay := 2 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still not true after %v: %w", timeout, err)
		}
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}
