//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// The tests in this file run dlock as a process that the kernel hands
// orphans to: PID 1 of a PID namespace of its own, as a container's
// entrypoint (a Kubernetes CronJob's "dlock run ... -- ./migrate.sh"), and
// a child subreaper (prctl PR_SET_CHILD_SUBREAPER), which gets the orphans
// of its descendants the same way and needs no privilege.

// initMode is one way of starting dlock as such a process.
type initMode struct {
	name string
	// start starts "dlock args..." as startDlock does.
	start func(t *testing.T, srv *redistest.Server, args ...string) *dlockProcess
	// pid returns the pid of the dlock that start started, as this test
	// sees it.
	pid func(t *testing.T, p *dlockProcess) int
}

func init() { testCommands["subreaper"] = subreaperMain }

var initModes = []initMode{
	{"pid1", startDlockPID1, pidUnderUnshare},
	{"subreaper", startDlockSubreaper, func(_ *testing.T, p *dlockProcess) int { return p.cmd.Process.Pid }},
}

// pidNamespaceErr says why a PID namespace cannot be made here (unshare(1)
// missing, or not allowed: it needs root, or user namespaces), or nil.
var pidNamespaceErr = sync.OnceValue(func() error {
	out, err := exec.Command("unshare", "--pid", "--fork", "--kill-child", "true").CombinedOutput()
	if err != nil {
		return fmt.Errorf("unshare --pid --fork --kill-child true: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
})

// startDlockPID1 starts dlock as PID 1 of a new PID namespace, under
// unshare(1), which waits for it and exits with its status.
func startDlockPID1(t *testing.T, srv *redistest.Server, args ...string) *dlockProcess {
	t.Helper()
	if err := pidNamespaceErr(); err != nil {
		t.Skipf("cannot run dlock as PID 1 of a PID namespace here: %v", err)
	}
	// --kill-child: the namespace ends with unshare, killed by the cleanup.
	return startProcess(t, srv, exec.Command("unshare", append([]string{"--pid", "--fork", "--kill-child", "dlock"}, args...)...))
}

// pidUnderUnshare returns the pid of the dlock that unshare runs: its
// child.
func pidUnderUnshare(t *testing.T, p *dlockProcess) int {
	t.Helper()
	var pid int
	waitUntil(t, "unshare to start dlock", func() bool {
		for child := range children(p.cmd.Process.Pid) {
			pid = child
		}
		select {
		case <-p.exited:
			t.Fatalf("dlock exited before its pid was found; output:\n%s", p.stderr.String())
		default:
		}
		return pid != 0
	})
	return pid
}

// startDlockSubreaper starts dlock as a child subreaper, under the
// subreaper command.
func startDlockSubreaper(t *testing.T, srv *redistest.Server, args ...string) *dlockProcess {
	t.Helper()
	return startProcess(t, srv, testCommand(t, "subreaper", append([]string{"dlock"}, args...)...)) // which the subreaper command becomes
}

// subreaperMain is the "subreaper COMMAND [ARGS...]" command of the tests:
// it makes itself a child subreaper, then executes COMMAND, which keeps
// that attribute.
func subreaperMain() int {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: subreaper COMMAND [ARGS...]")
		return 2
	}
	const prSetChildSubreaper = 36
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		fmt.Fprintln(os.Stderr, "subreaper: prctl:", errno)
		return 1
	}
	path, err := exec.LookPath(os.Args[1])
	if err == nil {
		err = syscall.Exec(path, os.Args[1:], os.Environ())
	}
	fmt.Fprintln(os.Stderr, "subreaper:", err)
	return 1
}

// children returns the child processes of pid, with their states ('Z'
// for a zombie), from /proc.
func children(pid int) map[int]byte {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	kids := make(map[int]byte)
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// "pid (comm) state ppid ...", where comm may hold anything.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			kids[child] = f[0][0]
		}
	}
	return kids
}

// TestRunAsInitReapsOrphans: processes the command starts in the
// background and leaves (a daemonizing helper, a pipeline's stray) are
// handed to dlock when their parent exits. dlock must reap them when they
// end, as init does, or their zombies pile up for as long as the command
// runs.
func TestRunAsInitReapsOrphans(t *testing.T) {
	for _, m := range initModes {
		t.Run(m.name, func(t *testing.T) {
			srv := redistest.Shared(t)
			name, dir := uniqueLockName(t), t.TempDir()
			p := m.start(t, srv, "run", name, "--", "sh", "-c", `(hold "$0/o1" &); (hold "$0/o2" &); exec hold "$0/main"`, dir)
			pid := m.pid(t, p)
			for _, d := range []string{"o1", "o2", "main"} {
				waitForFile(t, filepath.Join(dir, d, "started"))
			}
			// The subshells exit at once: their holds become dlock's.
			waitUntil(t, "the orphans to be handed to dlock", func() bool { return len(children(pid)) == 3 })
			for _, d := range []string{"o1", "o2"} {
				if err := os.Mkdir(filepath.Join(dir, d, "stop"), 0o777); err != nil {
					t.Fatal(err)
				}
			}
			var kids map[int]byte
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("dlock's children and their states: %v", kids)
				}
			})
			waitUntil(t, "dlock to reap the orphans (its children must be the command alone)", func() bool {
				kids = children(pid)
				return len(kids) == 1
			})
			if err := os.Mkdir(filepath.Join(dir, "main", "stop"), 0o777); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t); code != 0 {
				t.Errorf("dlock exited with %d, want 0; output:\n%s", code, p.stderr.String())
			}
		})
	}
}

// TestRunAsInitLostLockEndsGroup: after a lost lock, the command and a
// process it started both exit on SIGTERM. The process, orphaned, is
// dlock's to reap: its zombie, left in the command's process group, must
// not make dlock wait out the whole --grace for a group that has ended.
func TestRunAsInitLostLockEndsGroup(t *testing.T) {
	for _, m := range initModes {
		t.Run(m.name, func(t *testing.T) {
			srv := redistest.Shared(t)
			name, dir := uniqueLockName(t), t.TempDir()
			// Longer than p.wait waits.
			p := m.start(t, srv, "run", name, "--ttl", "1s", "--grace", "10m", "--", "sh", "-c", `hold "$0/child" & exec hold "$0/main"`, dir)
			waitForFile(t, filepath.Join(dir, "main", "started"))
			waitForFile(t, filepath.Join(dir, "child", "started"))
			if err := srv.Client(t).Del(context.Background(), "dlock:{"+name+"}").Err(); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t); code != exitLockLost {
				t.Errorf("dlock exited with %d, want %d; output:\n%s", code, exitLockLost, p.stderr.String())
			}
			for _, d := range []string{"main", "child"} {
				if got := waitForFile(t, filepath.Join(dir, d, "signal")); got != "terminated\n" {
					t.Errorf("%s got %q, want terminated", d, got)
				}
			}
		})
	}
}

// TestRunAsInitSignals: as PID 1, dlock gets the runtime's SIGTERM (a
// Kubernetes pod's deletion, or the end of a job's deadline) and a
// terminal's Ctrl-C (docker run -it) as anywhere else: the command gets
// them, the lock is released before dlock exits, and dlock exits with the
// command's status; a signal while waiting ends the wait.
func TestRunAsInitSignals(t *testing.T) {
	for _, m := range initModes {
		t.Run(m.name, func(t *testing.T) {
			srv := redistest.Shared(t)
			c := inspector(t, srv)

			t.Run("SIGTERM", func(t *testing.T) {
				name, dir := uniqueLockName(t), t.TempDir()
				p := m.start(t, srv, "run", name, "--", "hold", dir)
				waitForFile(t, filepath.Join(dir, "started"))
				if err := syscall.Kill(m.pid(t, p), syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				if code := p.wait(t); code != 143 {
					t.Errorf("dlock exited with %d, want 143; output:\n%s", code, p.stderr.String())
				}
				if got := waitForFile(t, filepath.Join(dir, "signal")); got != "terminated\n" {
					t.Errorf("the command got %q, want terminated", got)
				}
				if h, _ := state(t, c, name); h != 0 {
					t.Errorf("the lock is still held after dlock exited")
				}
			})

			t.Run("CtrlC", func(t *testing.T) {
				name, dir := uniqueLockName(t), t.TempDir()
				p := m.start(t, srv, "run", name, "--", "hold", dir)
				waitForFile(t, filepath.Join(dir, "started"))
				// dlock's group, as a terminal sends it (with unshare in it).
				if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT); err != nil {
					t.Fatal(err)
				}
				if code := p.wait(t); code != 130 {
					t.Errorf("dlock exited with %d, want 130; output:\n%s", code, p.stderr.String())
				}
				if got := waitForFile(t, filepath.Join(dir, "signal")); got != "interrupt\n" {
					t.Errorf("the command got %q, want interrupt", got)
				}
				if h, _ := state(t, c, name); h != 0 {
					t.Errorf("the lock is still held after dlock exited")
				}
			})

			t.Run("SIGTERMWhileWaiting", func(t *testing.T) {
				name, dir := uniqueLockName(t), t.TempDir()
				l, err := c.Mutex(name).Lock(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				defer l.Unlock(context.Background())
				p := m.start(t, srv, "run", name, "--", "hold", dir)
				waitUntil(t, "dlock waiting", func() bool { _, w := state(t, c, name); return w == 1 })
				if err := syscall.Kill(m.pid(t, p), syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				if code := p.wait(t); code != 143 {
					t.Errorf("dlock exited with %d, want 143; output:\n%s", code, p.stderr.String())
				}
				if _, w := state(t, c, name); w != 0 {
					t.Errorf("%d waiters left after dlock exited", w)
				}
			})
		})
	}
}

// TestRunAsInitCommandStatus: reaping orphans must never take the
// command's own exit status from os/exec's Wait, however fast the command
// exits and however many orphans end around it.
func TestRunAsInitCommandStatus(t *testing.T) {
	for _, m := range initModes {
		t.Run(m.name, func(t *testing.T) {
			srv := redistest.Shared(t)
			for i := 0; i < 10; i++ {
				script := `exit 7`
				if i%2 == 1 {
					script = `i=0; while [ $i -lt 50 ]; do (true &); i=$((i+1)); done; exit 7`
				}
				p := m.start(t, srv, "run", uniqueLockName(t), "--", "sh", "-c", script)
				if code := p.wait(t); code != 7 {
					t.Fatalf("run %d (%s): dlock exited with %d, want 7; output:\n%s", i, script, code, p.stderr.String())
				}
			}
		})
	}
}
