package redistest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartAnswersPing(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := Start(t)
	t.Logf("started %s (pid %d) in %v", s.Addr(), s.PID(), time.Since(start))

	if got := s.Client(t).Ping(context.Background()).Val(); got != "PONG" {
		t.Fatalf("PING = %q, want PONG", got)
	}
	if s.Addr() != "127.0.0.1:"+strconv.Itoa(s.Port()) {
		t.Errorf("Addr = %q, Port = %d", s.Addr(), s.Port())
	}
	if s.URL() != "redis://"+s.Addr() {
		t.Errorf("URL = %q", s.URL())
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "redis.log")); err != nil {
		t.Errorf("no log in Dir: %v", err)
	}
	if !s.Running() {
		t.Error("Running = false for a live server")
	}
	// The harness's own defaults are in force.
	if got := s.Do(t, "CONFIG", "GET", "appendonly"); !replyContains(got, "no") {
		t.Errorf("appendonly = %v, want no", got)
	}
	if got := s.Do(t, "DEBUG", "SLEEP", "0"); got != "OK" {
		t.Errorf("DEBUG SLEEP 0 = %v, want OK (debug command enabled)", got)
	}
	if got := s.Do(t, "GET", "missing"); got != nil {
		t.Errorf("Do(GET missing) = %v, want nil", got)
	}
}

func TestStopIsGracefulAndIdempotent(t *testing.T) {
	t.Parallel()
	s := Start(t)
	pid := s.PID()
	s.Stop()
	s.Stop()
	if s.Running() {
		t.Fatal("Running after Stop")
	}
	if err := pingAddr(s.Addr(), ""); err == nil {
		t.Fatal("PING still answered after Stop")
	}
	if processExists(pid) {
		t.Fatalf("process %d still exists after Stop", pid)
	}
}

func TestKillThenRestartOnSamePort(t *testing.T) {
	t.Parallel()
	s := Start(t)
	port, pid := s.Port(), s.PID()

	s.Kill()
	if s.Running() {
		t.Fatal("Running after Kill")
	}
	if err := pingAddr(s.Addr(), ""); err == nil {
		t.Fatal("PING answered after Kill")
	}
	if processExists(pid) {
		t.Fatalf("process %d not reaped after Kill", pid)
	}

	s.Restart()
	if s.Port() != port {
		t.Fatalf("port changed from %d to %d", port, s.Port())
	}
	if s.PID() == pid {
		t.Fatal("Restart kept the old PID")
	}
	if err := pingAddr(s.Addr(), ""); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	// Restart of a running server kills and starts it too.
	pid = s.PID()
	s.Restart()
	if s.PID() == pid || !s.Running() {
		t.Fatalf("Restart of a running server: pid %d -> %d, running %v", pid, s.PID(), s.Running())
	}
}

// TestKilledServersPortIsNeverHandedOutAgain: a test that kills a server
// relies on nothing of its binary answering on that port afterwards.
func TestKilledServersPortIsNeverHandedOutAgain(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.Kill()
	seen := map[int]bool{s.Port(): true}
	for i := 0; i < 500; i++ {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("freePort handed out port %d twice (killed server's: %d)", port, s.Port())
		}
		seen[port] = true
	}
}

func TestDataSurvivesRestartOnlyWithPersistence(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []Option
		want any
	}{
		{"default", nil, nil},
		{"persistence", []Option{WithPersistence()}, "v"},
	} {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := Start(t, tc.opts...)
			s.Do(t, "SET", "k", "v")
			s.Kill() // a crash, not a clean shutdown
			s.Restart()
			if got := s.Do(t, "GET", "k"); got != tc.want {
				t.Fatalf("GET k after Kill+Restart = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPauseTimesOutAndResumeRestores(t *testing.T) {
	t.Parallel()
	s := Start(t)
	opt := s.Options()
	opt.ReadTimeout = 200 * time.Millisecond
	opt.WriteTimeout = 200 * time.Millisecond
	opt.MaxRetries = -1
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	s.Pause()
	start := time.Now()
	err := rdb.Get(ctx, "k").Err()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("GET on a paused server: %v, want a timeout", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("GET failed after %v, before the read timeout", d)
	}
	if !s.Running() {
		t.Fatal("a paused server should count as running")
	}

	s.Resume()
	s.Resume() // idempotent
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET after Resume = %q, %v", got, err)
	}
}

func TestStopResumesAPausedServer(t *testing.T) {
	t.Parallel()
	s := Start(t)
	pid := s.PID()
	s.Pause()
	start := time.Now()
	s.Stop()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Stop of a paused server took %v; it should resume it and shut down at once", d)
	}
	if processExists(pid) {
		t.Fatalf("process %d left behind", pid)
	}
}

func TestStartNodesAreIndependent(t *testing.T) {
	t.Parallel()
	nodes := StartNodes(t, 5)
	if len(nodes) != 5 {
		t.Fatalf("got %d nodes, want 5", len(nodes))
	}
	ports := map[int]bool{}
	for i, n := range nodes {
		if ports[n.Port()] {
			t.Fatalf("port %d used twice", n.Port())
		}
		ports[n.Port()] = true
		n.Do(t, "SET", "who", strconv.Itoa(i))
	}
	for i, n := range nodes {
		if got := n.Do(t, "GET", "who"); got != strconv.Itoa(i) {
			t.Errorf("node %d: who = %v; nodes share data", i, got)
		}
		if got := n.Do(t, "ROLE").([]any)[0]; got != "master" {
			t.Errorf("node %d: role %v", i, got)
		}
	}
}

func TestPassword(t *testing.T) {
	t.Parallel()
	s := Start(t, WithPassword("s3cret"))
	if err := pingAddr(s.Addr(), ""); err == nil {
		t.Fatal("PING without AUTH succeeded")
	}
	if got := s.Client(t).Ping(context.Background()).Val(); got != "PONG" {
		t.Fatalf("Client PING = %q", got)
	}
	opt, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if opt.Password != "s3cret" || opt.Addr != s.Addr() {
		t.Fatalf("URL %q parses to addr %q password %q", s.URL(), opt.Addr, opt.Password)
	}
	s.Kill()
	s.Restart()
	if got := s.Do(t, "PING"); got != "PONG" {
		t.Fatalf("PING after Restart with password = %v", got)
	}
}

func TestWithArgs(t *testing.T) {
	t.Parallel()
	s := Start(t, WithArgs("--maxmemory", "10mb"))
	if got := s.Do(t, "CONFIG", "GET", "maxmemory"); !replyContains(got, strconv.Itoa(10<<20)) {
		t.Fatalf("maxmemory = %v", got)
	}
}

func TestFlushScripts(t *testing.T) {
	t.Parallel()
	s := Start(t)
	rdb := s.Client(t)
	ctx := context.Background()
	sha, err := rdb.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		t.Fatal(err)
	}
	s.FlushScripts(t)
	err = rdb.EvalSha(ctx, sha, nil).Err()
	if err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		t.Fatalf("EVALSHA after FlushScripts: %v, want NOSCRIPT", err)
	}
}

func TestBadArgumentFailsWithLog(t *testing.T) {
	t.Parallel()
	// A start that fails must report why; run it against a recorder.
	rec := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(rec, WithArgs("--no-such-option", "1"))
	}()
	<-done
	if !rec.failed {
		t.Fatal("Start with a bad argument did not fail")
	}
	if !containsAll(rec.msg, "exited during startup", "no-such-option") {
		t.Fatalf("failure message lacks the cause:\n%s", rec.msg)
	}
}

func TestShared(t *testing.T) {
	t.Parallel()
	a, b := Shared(t), Shared(t)
	if a != b {
		t.Fatal("Shared returned two servers")
	}
	if got := a.Do(t, "PING"); got != "PONG" {
		t.Fatalf("PING = %v", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("Kill on the Shared server did not panic")
		}
	}()
	a.Kill()
}

// pingAddr sends PING on a fresh connection.
func pingAddr(addr, password string) error {
	c, err := dialCtl(addr, password, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.close()
	_, err = c.do("PING")
	return err
}

// processExists reports whether pid is a live or zombie process.
func processExists(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

func replyContains(reply any, want string) bool {
	switch r := reply.(type) {
	case []any:
		for _, v := range r {
			if v == want {
				return true
			}
		}
	case map[any]any:
		for _, v := range r {
			if v == want {
				return true
			}
		}
	}
	return false
}

func TestPortTakenIsDetected(t *testing.T) {
	t.Parallel()
	cfg := newConfig(nil)
	// Taken by a plain listener: redis-server cannot bind and says so.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := &Server{dir: t.TempDir(), port: l.Addr().(*net.TCPAddr).Port}
	s.argv = func(s *Server) []string { return cfg.serverArgs(s) }
	s.mu.Lock()
	err = s.launch()
	s.mu.Unlock()
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("launch on a port with a listener: %v, want errPortTaken", err)
	}

	// Taken by another redis-server: PING there must not pass for ours.
	other := Start(t)
	s = &Server{dir: t.TempDir(), port: other.Port()}
	s.argv = func(s *Server) []string { return cfg.serverArgs(s) }
	s.mu.Lock()
	err = s.launch()
	s.mu.Unlock()
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("launch on another server's port: %v, want errPortTaken", err)
	}
	if s.Running() {
		t.Fatal("the loser is still running")
	}
}

// TestWrapperRunsTheServer: WithWrapper's command runs redis-server (here
// nice, which lowers the priority and execs it), at the first start and
// after a Restart.
func TestWrapperRunsTheServer(t *testing.T) {
	t.Parallel()
	if _, err := os.ReadFile("/proc/self/stat"); err != nil {
		t.Skipf("no /proc to read a process's priority from: %v", err)
	}
	s := Start(t, WithWrapper("nice", "-n", "7"))
	wrapped := func(when string) {
		t.Helper()
		if got := s.Client(t).Ping(context.Background()).Val(); got != "PONG" {
			t.Fatalf("%s: PING = %q, want PONG", when, got)
		}
		stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(s.PID()), "stat"))
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		// The fields after the command's name: state is the first, nice the 17th.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		self, err := os.ReadFile("/proc/self/stat")
		if err != nil {
			t.Fatal(err)
		}
		ours := strings.Fields(string(self[strings.LastIndexByte(string(self), ')')+1:]))
		if len(fields) < 17 || len(ours) < 17 {
			t.Fatalf("%s: short /proc stat: %q", when, stat)
		}
		n, _ := strconv.Atoi(fields[16])
		base, _ := strconv.Atoi(ours[16])
		if want := min(base+7, 19); n != want {
			t.Errorf("%s: the server's nice value is %d, want %d: the wrapper did not run it", when, n, want)
		}
	}
	wrapped("after Start")
	s.Restart()
	wrapped("after Restart")
}
