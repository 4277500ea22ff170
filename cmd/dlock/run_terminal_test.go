//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestRunForegroundCtrlC runs dlock --foreground as a terminal's foreground
// job, on a pseudo-terminal, and types Ctrl-C: the terminal sends SIGINT to
// the command itself, which here handles it and runs on, and dlock, which
// got it too, waits for the command. A SIGTERM sent to dlock afterwards is
// passed on, and dlock exits with the command's status. (Whether dlock also
// passed the SIGINT on cannot be seen here: the two would arrive together
// and count as one. TestFromTerminal checks that it tells them apart.)
func TestRunForegroundCtrlC(t *testing.T) {
	srv := redistest.Shared(t)
	name, dir := uniqueLockName(t), t.TempDir()
	master, tty := openPTY(t)
	log := filepath.Join(dir, "signals")
	script := `trap 'echo INT >> "$1"' INT; trap 'echo TERM >> "$1"; exit 3' TERM; : > "$1.started"; while :; do sleep 0.05; done`
	cmd := testCommand(t, "dlock", "run", "--foreground", name, "--", "sh", "-c", script, "sh", log)
	onTerminal(cmd, tty)
	p := startProcess(t, srv, cmd)
	waitForFile(t, log+".started")
	if _, err := master.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	waitUntil(t, "the command's SIGINT", func() bool { b, _ := os.ReadFile(log); return len(b) > 0 })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 3 {
		t.Errorf("dlock exited with %d, want the command's 3; output:\n%s", code, p.stderr.String())
	}
	if got, _ := os.ReadFile(log); string(got) != "INT\nTERM\n" {
		t.Errorf("the command got %q, want INT, then TERM", got)
	}
}

func init() { testCommands["fromterminal"] = fromTerminalMain }

// fromTerminalMain prints what fromTerminal says of SIGINT, SIGQUIT and
// SIGTERM in this process.
func fromTerminalMain() int {
	fmt.Println(fromTerminal(syscall.SIGINT), fromTerminal(syscall.SIGQUIT), fromTerminal(syscall.SIGTERM))
	return 0
}

// TestFromTerminal checks that dlock takes a SIGINT or SIGQUIT for its
// terminal's (sent to the command too, under --foreground) only while it
// is that terminal's foreground job; SIGTERM never.
func TestFromTerminal(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		attr func(*exec.Cmd)
		want string
	}{
		{"foreground job", func(cmd *exec.Cmd) { _, tty := openPTY(t); onTerminal(cmd, tty) }, "true true false"},
		{"no terminal", func(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} }, "false false false"},
		{"background job", func(cmd *exec.Cmd) {
			// A shell with job control, on the terminal, starts it in
			// a process group of its own, in the background.
			_, tty := openPTY(t)
			onTerminal(cmd, tty)
			named := filepath.Join(t.TempDir(), "fromterminal")
			if err := os.Symlink(exe, named); err != nil {
				t.Fatal(err)
			}
			cmd.Path, cmd.Args = "/bin/sh", []string{"sh", "-c", `set -m; "$0" & wait`, named}
		}, "false false false"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := testCommand(t, "fromterminal")
			c.attr(cmd)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != c.want {
				t.Errorf("fromTerminal of SIGINT, SIGQUIT, SIGTERM: %s, want %s", got, c.want)
			}
		})
	}
}

// onTerminal makes cmd a session of its own, with tty as its controlling
// terminal and its standard input: the terminal's foreground job.
func onTerminal(cmd *exec.Cmd, tty *os.File) {
	cmd.Stdin = tty // fd 0, named by Ctty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
}

// openPTY opens a pseudo-terminal: its master side, for the test to type
// into, and the terminal itself.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return master, tty
}

// TestRunCtrlC sends SIGINT to dlock's whole process group, as a terminal
// does for Ctrl-C: the command, in a group of its own, gets it from dlock.
func TestRunCtrlC(t *testing.T) {
	srv := redistest.Shared(t)
	name, dir := uniqueLockName(t), t.TempDir()
	p := startDlock(t, srv, "run", name, "--", "hold", dir)
	waitForFile(t, filepath.Join(dir, "started"))
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 130 {
		t.Errorf("dlock exited with %d, want 130; output:\n%s", code, p.stderr.String())
	}
	if got := waitForFile(t, filepath.Join(dir, "signal")); got != "interrupt\n" {
		t.Errorf("the command got %q, want interrupt", got)
	}
	if h, _ := state(t, inspector(t, srv), name); h != 0 {
		t.Errorf("the lock is still held after dlock exited")
	}
}
