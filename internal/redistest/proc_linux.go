package redistest

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// sysProcAttr makes the child die with the thread that forked it (see spawn).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// WaitStopped waits until the kernel reports pid as stopped by a signal, so
// that a command sent right after Pause cannot still be served.
func WaitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return err
		}
		// The state follows the command name, which is in parentheses and may
		// itself contain spaces or parentheses.
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) && s[i+2] == 'T' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d did not stop within %v", pid, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}
