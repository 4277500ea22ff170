//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// lockedBuffer is a bytes.Buffer safe for a process's output and a test
// reading it meanwhile.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// dlockProcess is this test binary run as the dlock command, in a process
// of its own, so that it can be signalled.
type dlockProcess struct {
	cmd    *exec.Cmd
	stderr lockedBuffer
	exited chan struct{}
}

// startDlock starts "dlock args..." with REDIS_URL set to srv, in a process
// group of its own, as a shell would start a job.
func startDlock(t *testing.T, srv *redistest.Server, args ...string) *dlockProcess {
	t.Helper()
	return startProcess(t, srv, testCommand(t, "dlock", args...))
}

// testCommand returns a command that runs this test binary as the test
// command name (testCommands: testscript.RunMain runs it for that argv[0]).
func testCommand(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Args[0] = name
	return cmd
}

// startProcess starts cmd, which runs dlock (itself, or under a wrapper), as
// startDlock does; in a process group of its own unless cmd's attributes
// say otherwise.
func startProcess(t *testing.T, srv *redistest.Server, cmd *exec.Cmd) *dlockProcess {
	t.Helper()
	p := &dlockProcess{cmd: cmd, exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), redisURLEnv+"="+srv.URL(), "GORACE="+goraceNoExitSleep())
	p.cmd.Stdout = &p.stderr
	p.cmd.Stderr = &p.stderr
	if p.cmd.SysProcAttr == nil {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	// A command that outlives dlock holds its output pipe open: do not wait
	// for that.
	p.cmd.WaitDelay = time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *dlockProcess) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(30 * time.Second):
		t.Fatalf("dlock still running after 30s; output:\n%s", p.stderr.String())
		return 0
	}
}

// waitForFile waits until path exists and returns its content.
func waitForFile(t *testing.T, path string) string {
	t.Helper()
	var b []byte
	waitUntil(t, "file "+path, func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil
	})
	return string(b)
}

// state returns the number of holders and waiters of name's mutex.
func state(t *testing.T, c *dlock.Client, name string) (holders, waiters int) {
	t.Helper()
	infos, err := c.Inspect(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		if info.Kind == dlock.KindMutex {
			return len(info.Holders), len(info.Waiters)
		}
	}
	return 0, 0
}

// TestRunForwardsSignals sends signals to dlock alone, as kill(1) or a
// service manager would: the command gets them, dlock exits with the
// command's status and releases the lock. With --foreground too: dlock is
// not the terminal's foreground job here (the test has no terminal, or dlock
// runs in a group of its own), so a SIGINT came from kill, not from a
// terminal that sent it to the command as well, and is passed on.
func TestRunForwardsSignals(t *testing.T) {
	srv := redistest.Shared(t)
	c := inspector(t, srv)
	for _, tc := range []struct {
		flags []string
		sig   syscall.Signal
	}{
		{nil, syscall.SIGTERM},
		{nil, syscall.SIGINT},
		{nil, syscall.SIGHUP},
		{[]string{"--foreground"}, syscall.SIGINT},
		{[]string{"--foreground"}, syscall.SIGTERM},
	} {
		sig := tc.sig
		t.Run(strings.Join(append(tc.flags, sig.String()), " "), func(t *testing.T) {
			name, dir := uniqueLockName(t), t.TempDir()
			args := append(append([]string{"run"}, tc.flags...), name, "--", "hold", dir)
			p := startDlock(t, srv, args...)
			waitForFile(t, filepath.Join(dir, "started"))
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t); code != 128+int(sig) {
				t.Errorf("dlock exited with %d, want %d; output:\n%s", code, 128+int(sig), p.stderr.String())
			}
			if got := waitForFile(t, filepath.Join(dir, "signal")); got != sig.String()+"\n" {
				t.Errorf("the command got %q, want %s", got, sig)
			}
			if h, _ := state(t, c, name); h != 0 {
				t.Errorf("the lock is still held after dlock exited")
			}
		})
	}
}

// TestRunInterruptedWhileWaiting interrupts a run that waits for the lock:
// it exits with 130 without running its command, and leaves the queue.
func TestRunInterruptedWhileWaiting(t *testing.T) {
	srv := redistest.Shared(t)
	c := inspector(t, srv)
	name, dir := uniqueLockName(t), t.TempDir()
	l, err := c.Mutex(name).Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())

	p := startDlock(t, srv, "run", name, "--", "hold", dir)
	waitUntil(t, "dlock waiting", func() bool { _, w := state(t, c, name); return w == 1 })
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 130 {
		t.Errorf("dlock exited with %d, want 130; output:\n%s", code, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "got SIGINT while waiting for") {
		t.Errorf("dlock did not say it was interrupted while waiting:\n%s", p.stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "started")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran: %v", err)
	}
	if _, w := state(t, c, name); w != 0 {
		t.Errorf("%d waiters left after dlock exited", w)
	}
}

// TestRunKilledDlockKillsItsCommand kills dlock with SIGKILL: nothing will
// renew the lock, so its command must not go on running.
func TestRunKilledDlockKillsItsCommand(t *testing.T) {
	srv := redistest.Shared(t)
	name, dir := uniqueLockName(t), t.TempDir()
	p := startDlock(t, srv, "run", name, "--", "sh", "-c", `echo $$ > "$0/pid"; exec hold "$0"`, dir)
	waitForFile(t, filepath.Join(dir, "started"))
	pid, err := strconv.Atoi(strings.TrimSpace(waitForFile(t, filepath.Join(dir, "pid"))))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
	waitUntil(t, fmt.Sprintf("the command (pid %d) to die", pid), func() bool { return !running(pid) })
}

// TestRunWaitEndedByRedisFailure stops the server while a run waits with
// --wait: the wait ends with Redis failing, not with the lock held, so the
// run exits with 1 (not 75) and says why, within --wait.
func TestRunWaitEndedByRedisFailure(t *testing.T) {
	srv := redistest.Start(t)
	c := inspector(t, srv)
	name, dir := uniqueLockName(t), t.TempDir()
	if _, err := c.Mutex(name).Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The wait must outlast an attempt that fails: without go-redis's
	// retries, one dial, retried 5 times 100ms apart, within a second.
	const wait = 5 * time.Second
	start := time.Now()
	p := startDlock(t, srv, "--redis", srv.URL()+"?max_retries=-1", "run", name, "--wait", wait.String(), "--", "hold", dir)
	waitUntil(t, "dlock waiting", func() bool { _, w := state(t, c, name); return w == 1 })
	srv.Kill()
	// Keep the dead server's port: another test binary's redis-server
	// given it would answer dlock's attempts. Connections to it are
	// accepted and closed at once, so every attempt fails.
	if ln, err := net.Listen("tcp", srv.Addr()); err == nil {
		t.Cleanup(func() { _ = ln.Close() })
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				_ = conn.Close()
			}
		}()
	}
	code := p.wait(t)
	out := p.stderr.String()
	if code != exitFailure {
		t.Errorf("dlock exited with %d, want %d; output:\n%s", code, exitFailure, out)
	}
	for _, want := range []string{"after --wait 5s: Redis failed or did not answer while waiting", "last error: ", "check that the server runs"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "is held") || strings.Contains(out, "dlock: dlock:") {
		t.Errorf("the output blames the holder, or repeats the prefix:\n%s", out)
	}
	if d := time.Since(start); d > wait+5*time.Second {
		t.Errorf("dlock took %v with --wait %v", d, wait)
	}
	if _, err := os.Stat(filepath.Join(dir, "started")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran: %v", err)
	}
}

// TestRunWaitUnanswered: a server that answers no lock command within
// --wait (writes paused, as a failover does; PING still answers) never
// showed the lock held, so dlock must not say "is held" and exit 75 (a
// cron wrapper would skip the job, thinking another host ran it): it is a
// failure, exit 1, that says Redis did not answer.
func TestRunWaitUnanswered(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	if err := rdb.Do(context.Background(), "client", "pause", 4000, "write").Err(); err != nil {
		t.Fatal(err)
	}
	name, dir := uniqueLockName(t), t.TempDir()
	p := startDlock(t, srv, "run", name, "--wait", "1s", "--", "hold", dir)
	code := p.wait(t)
	out := p.stderr.String()
	if code != exitFailure || strings.Contains(out, "is held") || !strings.Contains(out, "no reply from Redis") {
		t.Errorf("dlock run --wait 1s on a server whose writes are paused: exit %d; want %d and a message that Redis did not answer:\n%s", code, exitFailure, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "started")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran: %v", err)
	}
}

// TestRunVerboseShowsRetriedFailures: a wait retries Redis's failures until
// it gets the lock (for ever without --wait); with -v they are shown, so a
// run pointed at a replica does not wait in silence.
func TestRunVerboseShowsRetriedFailures(t *testing.T) {
	srv := redistest.Start(t)
	// A replica of a master that does not exist: every write is refused.
	if err := srv.Client(t).Do(context.Background(), "replicaof", "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	name, dir := uniqueLockName(t), t.TempDir()
	p := startDlock(t, srv, "run", name, "--wait", "1s", "-v", "--", "hold", dir)
	code := p.wait(t)
	out := p.stderr.String()
	if code != exitFailure || !strings.Contains(out, "attempt failed; retrying") || !strings.Contains(out, "READONLY") {
		t.Errorf("dlock run -v against a replica: exit %d; want %d and the retried READONLY failures:\n%s", code, exitFailure, out)
	}
}

// TestNotObtainedHoldersUnknown asks who holds a lock of a server that does
// not answer: the answer says it is unknown, and comes within a bound well
// under 2 s.
func TestNotObtainedHoldersUnknown(t *testing.T) {
	srv := redistest.Start(t)
	c := inspector(t, srv)
	srv.Pause()
	defer srv.Resume() // before the client's cleanup, which waits for the abandoned call
	a := &app{stderr: io.Discard}
	start := time.Now()
	err := a.notObtained(c, &runOptions{wait: time.Second, waitSet: true}, "unknown-holder")
	if d := time.Since(start); d > holdersTimeout+time.Second {
		t.Errorf("notObtained took %v, want about %v", d, holdersTimeout)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, `"unknown-holder" is held (by whom is unknown: `) || !strings.HasSuffix(msg, "; gave up after --wait 1s") {
		t.Errorf("notObtained = %q, want it to say the holder is unknown", msg)
	}
}

// TestRunSignalEndsStoppedCommand stops the command (as SIGTTIN stops one
// that reads the terminal from its own group), then sends dlock SIGTERM:
// dlock passes it on with SIGCONT, so the command ends, and dlock exits
// with its status, 128+SIGTERM.
func TestRunSignalEndsStoppedCommand(t *testing.T) {
	srv := redistest.Shared(t)
	name, dir := uniqueLockName(t), t.TempDir()
	p := startDlock(t, srv, "run", name, "--", "sh", "-c", `echo $$ > "$0/pid.tmp" && mv "$0/pid.tmp" "$0/pid"; kill -STOP $$; echo resumed`, dir)
	pid, err := strconv.Atoi(strings.TrimSpace(waitForFile(t, filepath.Join(dir, "pid"))))
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the command to stop", func() bool { return procState(pid) == 'T' })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("dlock exited with %d, want %d; output:\n%s", code, 128+int(syscall.SIGTERM), p.stderr.String())
	}
	if h, _ := state(t, inspector(t, srv), name); h != 0 {
		t.Errorf("the lock is still held after dlock exited")
	}
}

// TestRunNotSuspended sends dlock SIGTSTP (Ctrl-Z), SIGTTIN and SIGTTOU
// while its command runs under a lock with a short TTL: dlock must not
// stop, and must go on renewing, so the lock stays held with the same
// token for several TTLs.
func TestRunNotSuspended(t *testing.T) {
	srv := redistest.Shared(t)
	c := inspector(t, srv)
	name, dir := uniqueLockName(t), t.TempDir()
	const ttl = time.Second
	p := startDlock(t, srv, "run", name, "--ttl", ttl.String(), "--", "hold", dir)
	waitForFile(t, filepath.Join(dir, "started"))
	token := holderToken(t, c, name)
	if err := p.cmd.Process.Signal(syscall.SIGTSTP); err != nil {
		t.Fatal(err)
	}
	// The note also shows that SIGTTIN and SIGTTOU are ignored by now.
	waitUntil(t, "the note on stderr", func() bool { return strings.Contains(p.stderr.String(), "dlock: not suspending: ") })
	for _, sig := range []syscall.Signal{syscall.SIGTTIN, syscall.SIGTTOU} {
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	for start := time.Now(); time.Since(start) < 3*ttl; time.Sleep(50 * time.Millisecond) {
		if st := procState(p.cmd.Process.Pid); st == 'T' || st == 't' {
			t.Fatalf("dlock is stopped; output:\n%s", p.stderr.String())
		}
		if got := holderToken(t, c, name); got != token {
			t.Fatalf("%v after the signals, the lock's holder has token %d, want %d (still held by dlock); output:\n%s",
				time.Since(start), got, token, p.stderr.String())
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "stop"), 0o777); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 0 {
		t.Errorf("dlock exited with %d, want 0; output:\n%s", code, p.stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "signal")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command got a signal: %v", err)
	}
}

// holderToken returns the fencing token of the holder of name's mutex, or 0.
func holderToken(t *testing.T, c *dlock.Client, name string) int64 {
	t.Helper()
	infos, err := c.Inspect(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		if info.Kind == dlock.KindMutex && len(info.Holders) == 1 {
			return info.Holders[0].Token
		}
	}
	return 0
}
