package main

import "syscall"

// parentDeathSignal makes the kernel kill the command should dlock die
// without cleaning up (SIGKILL, the OOM killer): nothing would renew the
// lock any more, so within a TTL another host could take it while the
// command still ran. The signal follows the thread that started the
// command, so runCommand starts it from a thread of its own that outlives it.
func parentDeathSignal(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }
