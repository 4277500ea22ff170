//go:build unix

package redistest

import (
	"os"
	"syscall"
)

// The signals that pause and resume a server (Pause, Resume).
var (
	sigStop os.Signal = syscall.SIGSTOP
	sigCont os.Signal = syscall.SIGCONT
)
