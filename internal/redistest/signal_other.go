//go:build !unix

package redistest

import "os"

// noSignal stands for a signal the system does not have: sending it fails,
// so Pause panics saying so. (Windows has neither SIGSTOP nor SIGCONT; the
// harness needs Debian's redis-server anyway, but the package still builds,
// so that `go vet` of the module works there.)
type noSignal string

func (s noSignal) String() string { return string(s) }
func (noSignal) Signal()          {}

var (
	sigStop os.Signal = noSignal("SIGSTOP")
	sigCont os.Signal = noSignal("SIGCONT")
)
