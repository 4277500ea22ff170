package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
)

// cannotRun is the exit status of a command that could not be started: 127
// when it was not found, 126 otherwise, as in shells.
func cannotRun(command string, err error) error {
	code := exitCannotRun
	var bad *badInterpreterError
	if !errors.As(err, &bad) && (errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist)) {
		code = exitNotFound
	}
	return &exitStatus{code: code, err: fmt.Errorf("cannot run %s: %w", command, err)}
}

// badInterpreterError is a script whose #! line names an interpreter that
// cannot be run. The kernel reports it as the script itself missing
// (ENOENT) or not executable; shells say "bad interpreter" and exit 126.
type badInterpreterError struct {
	interp string
	err    error
}

func (e *badInterpreterError) Error() string {
	return fmt.Sprintf("bad interpreter %q (named in its #! line): %v", e.interp, e.err)
}

func (e *badInterpreterError) Unwrap() error { return e.err }

// checkInterpreter returns a *badInterpreterError when the file at path is
// a script whose interpreter does not exist or is not an executable file.
// It reads the #! line as the kernel does: the first 256 bytes at most, the
// interpreter up to the first space or tab (so a "\r" of a DOS line ending
// is part of its name). A file it cannot read is left to the start.
func checkInterpreter(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	buf := make([]byte, 256)
	n, _ := io.ReadFull(f, buf)
	line, ok := bytes.CutPrefix(buf[:n], []byte("#!"))
	if !ok {
		return nil
	}
	line, _, _ = bytes.Cut(line, []byte("\n"))
	fields := strings.FieldsFunc(string(line), func(r rune) bool { return r == ' ' || r == '\t' })
	if len(fields) == 0 {
		return nil // no interpreter at all: the start reports it
	}
	interp := fields[0]
	fi, err := os.Stat(interp)
	switch {
	case err != nil:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // "stat <interp>:" would repeat the name
		}
		return &badInterpreterError{interp: interp, err: err}
	case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
		return &badInterpreterError{interp: interp, err: errors.New("not an executable file")}
	}
	return nil
}

// defaultRunOwnerInfo is what "dlock status" shows of a run by default.
func defaultRunOwnerInfo(command string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	info := fmt.Sprintf("host=%s pid=%d cmd=%s", host, os.Getpid(), filepath.Base(command))
	if len(info) > dlock.MaxOwnerInfoLen {
		info = info[:dlock.MaxOwnerInfoLen]
	}
	return info
}

// supervise starts the command and waits for it, passing signals on and
// acting on a lost lock. It returns the command's exit status and the loss,
// or why the command could not be started.
func (a *app) supervise(cmd *exec.Cmd, h *held, o *runOptions, sigs <-chan os.Signal, reap *reaper) (code int, lost error, err error) {
	cmd, exited, err := startCommand(cmd, reap)
	if err != nil {
		return 0, nil, err
	}
	tstp, restore := keepRunning()
	defer restore()
	group := !o.foreground
	done := h.done
	var grace *time.Timer
	var graceC <-chan time.Time
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	for {
		select {
		case err := <-exited:
			if cmd.ProcessState == nil {
				return 0, lost, err // Wait failed without a status: should not happen
			}
			if graceC != nil && group {
				a.endGroup(cmd, graceC, sigs)
			}
			return exitCodeOf(cmd.ProcessState), lost, nil
		case sig := <-sigs:
			if !group && fromTerminal(sig) {
				continue // the terminal sent it to the command too
			}
			signalCommand(cmd.Process, sig, group)
		case <-tstp:
			// Ctrl-Z: dlock does not stop (see keepRunning). Passing
			// SIGTSTP on instead would suspend the command with the lock
			// held, but the shell, which waits for dlock, would see no
			// stopped job and give no prompt back: nothing but another
			// signal could resume it. Running on, and saying so, is safe.
			fmt.Fprintln(a.stderr, "dlock: not suspending: the lock would expire while the command runs; Ctrl-C ends the command")
			if !group {
				continueOwnGroup() // the terminal stopped the command too
			}
		case <-done:
			done = nil
			lost = fmt.Errorf("%s, while the command ran", message(h.err()))
			switch o.onLost {
			case onLostTerminate:
				fmt.Fprintf(a.stderr, "dlock: %v; sending SIGTERM to the command, SIGKILL in %v\n", lost, o.grace)
				signalCommand(cmd.Process, sigTERM, group)
				grace = time.NewTimer(o.grace)
				graceC = grace.C
			case onLostKill:
				fmt.Fprintf(a.stderr, "dlock: %v; killing the command\n", lost)
				signalCommand(cmd.Process, sigKILL, group)
			default:
				fmt.Fprintf(a.stderr, "dlock: %v; letting the command finish (--on-lost report)\n", lost)
			}
		case <-graceC:
			graceC = nil
			fmt.Fprintf(a.stderr, "dlock: the command is still running %v after SIGTERM; sending SIGKILL\n", o.grace)
			signalCommand(cmd.Process, sigKILL, group)
		}
	}
}

// endGroup is the rest of the grace after a lost lock when the command
// exited within it: processes it started that are still in its group run
// without the lock, so they get what is left of the grace after their
// SIGTERM, then SIGKILL, as the command itself would have. Signals to dlock
// meanwhile go to them.
func (a *app) endGroup(cmd *exec.Cmd, graceC <-chan time.Time, sigs <-chan os.Signal) {
	pid := cmd.Process.Pid
	if !groupAlive(pid) {
		return
	}
	// Processes that got the SIGTERM with the command may be ending right
	// now: they are reported only if they outlive a first look.
	told := false
	tell := func() {
		if !told {
			told = true
			fmt.Fprintln(a.stderr, "dlock: the command exited, but processes it started are still running without the lock; SIGKILL to them when the grace ends")
		}
	}
	tick := time.NewTicker(50 * time.Millisecond) // a group's end signals nothing: look
	defer tick.Stop()
	for {
		select {
		case <-graceC:
			if groupAlive(pid) {
				tell()
				signalCommand(cmd.Process, sigKILL, true)
			}
			return
		case sig := <-sigs:
			signalCommand(cmd.Process, sig, true)
		case <-tick.C:
			if !groupAlive(pid) {
				return
			}
			tell()
		}
	}
}

// startCommand starts cmd from a goroutine locked to an OS thread of its
// own, which then waits for it: the parent-death signal (Linux) is sent
// when the thread that started the command exits, so that thread must live
// as long as the command. The returned channel yields Wait's result for
// the command started: cmd, or, for a file the kernel will not execute (a
// script without a #! line), /bin/sh running it, as execvp(3), flock(1)
// and shells do. reap, when dlock reaps orphans, starts it and is told when
// Wait has reaped it.
func startCommand(cmd *exec.Cmd, reap *reaper) (*exec.Cmd, <-chan error, error) {
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := reap.start(cmd)
		if sh := shellFallback(cmd, err); sh != nil {
			cmd = sh
			err = reap.start(cmd)
		}
		if err != nil {
			runtime.UnlockOSThread()
			started <- err
			return
		}
		started <- nil
		// Never unlocked: the thread ends with this goroutine, once the
		// command has exited.
		err = cmd.Wait()
		reap.commandReaped()
		exited <- err
	}()
	if err := <-started; err != nil {
		return cmd, nil, err
	}
	return cmd, exited, nil
}
