//go:build unix

package main

import (
	"os"
	"syscall"
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
// it has one (every process it started, unless they left the group).
func signalCommand(p *os.Process, sig os.Signal, ownGroup bool) {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return
	}
	if ownGroup {
		_ = syscall.Kill(-p.Pid, s)
		return
	}
	_ = p.Signal(s)
}

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

// fromTerminal reports whether a terminal sends sig to its whole foreground
// process group: a command in dlock's group (--foreground) gets it itself.
func fromTerminal(sig os.Signal) bool { return sig == syscall.SIGINT || sig == syscall.SIGQUIT }

var (
	sigTERM os.Signal = syscall.SIGTERM
	sigKILL os.Signal = syscall.SIGKILL
)
