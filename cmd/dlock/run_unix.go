//go:build unix

package main

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// forwardedSignals are the signals "dlock run" passes on to its command.
// SIGINT and SIGTERM also end a wait for the lock; SIGHUP is caught too, so
// that a hang-up does not kill dlock without releasing the lock.
var forwardedSignals = []os.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
}

// commandAttr returns the command's process attributes: a process group of
// its own unless foreground, so that its whole tree can be signalled; and on
// Linux, SIGKILL should dlock die (see parentDeathSignal).
func commandAttr(ownGroup bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: ownGroup}
	parentDeathSignal(attr)
	return attr
}

// signalCommand sends sig to the command, or to its whole process group when
// it has one (every process it started, unless they left the group). A
// stopped process acts on nothing but SIGKILL until it is continued, and a
// command in a group of its own that reads the terminal is stopped by
// SIGTTIN; so, as GNU timeout does, SIGCONT follows every signal but those
// that stop or continue: a signal meant to end the command must not wait
// forever in a stopped group while dlock renews the lock.
func signalCommand(p *os.Process, sig os.Signal, ownGroup bool) {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return
	}
	send := func(s syscall.Signal) {
		if ownGroup {
			_ = syscall.Kill(-p.Pid, s)
		} else {
			_ = p.Signal(s)
		}
	}
	send(s)
	switch s {
	case syscall.SIGKILL, syscall.SIGCONT, syscall.SIGSTOP, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
	default:
		send(syscall.SIGCONT)
	}
}

// shellFallback returns a command that runs cmd's file with /bin/sh when
// starting it failed with ENOEXEC (a script without a #! line), as
// execvp(3) does; nil otherwise.
func shellFallback(cmd *exec.Cmd, err error) *exec.Cmd {
	if !errors.Is(err, syscall.ENOEXEC) {
		return nil
	}
	sh := exec.Command("/bin/sh", append([]string{cmd.Path}, cmd.Args[1:]...)...)
	sh.Stdin, sh.Stdout, sh.Stderr = cmd.Stdin, cmd.Stdout, cmd.Stderr
	sh.Env, sh.Dir, sh.SysProcAttr, sh.WaitDelay = cmd.Env, cmd.Dir, cmd.SysProcAttr, cmd.WaitDelay
	return sh
}

// groupAlive reports whether any process is left in the process group that
// the command led (pid is the command's, which named the group).
func groupAlive(pid int) bool {
	err := syscall.Kill(-pid, 0)
	return err == nil || err == syscall.EPERM
}

// keepRunning keeps dlock from being stopped while its command runs: a
// stopped dlock renews nothing, so the lock would expire while the command
// (in a group of its own, not stopped with dlock) goes on, and another
// host's run would start beside it. SIGTSTP (Ctrl-Z) is caught and returned
// on the channel, for run to say why it does not suspend. SIGTTOU and
// SIGTTIN are ignored: a background dlock writing to a terminal with "stty
// tostop" then writes instead of stopping (it never reads the terminal).
// Call it after the command started, which must not inherit the ignored
// signals; restore undoes it all.
func keepRunning() (tstp <-chan os.Signal, restore func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTSTP)
	signal.Ignore(syscall.SIGTTIN, syscall.SIGTTOU)
	return c, func() {
		signal.Stop(c)
		signal.Reset(syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	}
}

// continueOwnGroup sends SIGCONT to dlock's process group: with
// --foreground the command shares it, and the terminal's Ctrl-Z stopped the
// command along with dlock's other processes.
func continueOwnGroup() { _ = syscall.Kill(0, syscall.SIGCONT) }

// exitCodeOf returns the shell's exit status for a finished process: its
// exit code, or 128 + the signal that killed it.
func exitCodeOf(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// signalNumber is the number of sig, for 128 + n exit statuses.
func signalNumber(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return 0
}

// fromTerminal reports whether sig may have come from dlock's terminal,
// which sends Ctrl-C and Ctrl-\ (SIGINT, SIGQUIT) to its whole foreground
// process group: a command in dlock's group (--foreground) got it itself.
// Only while dlock's group is that foreground group: otherwise (no
// controlling terminal, as under a service manager or cron; a background
// job) the signal was sent to dlock alone, and is passed on like any other.
func fromTerminal(sig os.Signal) bool {
	if sig != syscall.SIGINT && sig != syscall.SIGQUIT {
		return false
	}
	tty, err := os.Open("/dev/tty") // the controlling terminal; fails without one
	if err != nil {
		return false
	}
	defer tty.Close()
	fg, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	return err == nil && fg == unix.Getpgrp()
}

var (
	sigTERM os.Signal = syscall.SIGTERM
	sigKILL os.Signal = syscall.SIGKILL
)
