//go:build !unix

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// forwardedSignals are the signals "dlock run" passes on to its command.
var forwardedSignals = []os.Signal{os.Interrupt}

// commandAttr keeps the command in dlock's process group: only Unix has
// process groups to signal.
func commandAttr(bool) *syscall.SysProcAttr { return nil }

// signalCommand kills the command for SIGKILL and SIGTERM (all that can be
// sent to another process here), and passes other signals on if possible.
func signalCommand(p *os.Process, sig os.Signal, _ bool) {
	if sig == sigKILL || sig == sigTERM {
		_ = p.Kill()
		return
	}
	_ = p.Signal(sig)
}

// shellFallback returns nil: there is no /bin/sh to fall back on.
func shellFallback(*exec.Cmd, error) *exec.Cmd { return nil }

// groupAlive reports false: there are no process groups here.
func groupAlive(int) bool { return false }

// keepRunning does nothing: there is no job control to stop dlock.
func keepRunning() (tstp <-chan os.Signal, restore func()) { return nil, func() {} }

// continueOwnGroup does nothing: there are no process groups to continue.
func continueOwnGroup() {}

func exitCodeOf(ps *os.ProcessState) int { return ps.ExitCode() }

func signalNumber(os.Signal) int { return 2 }

// fromTerminal reports whether the console sends sig to every process
// attached to it.
func fromTerminal(sig os.Signal) bool { return sig == os.Interrupt }

var (
	sigTERM os.Signal = syscall.SIGTERM
	sigKILL os.Signal = syscall.SIGKILL
)
