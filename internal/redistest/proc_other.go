//go:build !linux

package redistest

import (
	"syscall"
	"time"
)

// sysProcAttr sets nothing: Pdeathsig exists only on Linux, so elsewhere a
// crashed test binary can leave servers running (cleanup still stops them).
func sysProcAttr() *syscall.SysProcAttr { return nil }

// WaitStopped cannot observe the stop without /proc; give the signal a moment.
func WaitStopped(int, time.Duration) error {
	time.Sleep(10 * time.Millisecond)
	return nil
}
