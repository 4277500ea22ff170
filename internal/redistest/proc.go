package redistest

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"sync"
)

// notFoundFix is how to fix a missing Redis binary; tests fail with it.
const notFoundFix = "run `make test` (installs it) or `apt-get install -y redis-server`"

var (
	lookOnce   sync.Once
	serverPath string
	serverErr  error
)

// redisServer returns the path of redis-server, looked up on PATH once per
// test binary, or an error that says how to install it.
func redisServer() (string, error) {
	lookOnce.Do(func() { serverPath, serverErr = exec.LookPath("redis-server") })
	if serverErr != nil {
		return "", errors.New("redis-server not found: " + notFoundFix)
	}
	return serverPath, nil
}

// process is one started redis-server (or redis-cli) process.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
}

// spawn starts cmd with its output in logFile and returns once it runs.
//
// The fork happens on a goroutine locked to its own OS thread, and that
// goroutine then waits for the process. Pdeathsig (set by sysProcAttr on
// Linux) fires when the forking thread exits; this way that thread lives
// exactly as long as the child, and dies only with the whole test binary or
// after the child has been reaped. Forking from an ordinary goroutine would
// tie the child to whatever thread it ran on, and the runtime ends threads
// whose locked goroutine returns: an unrelated LockOSThread elsewhere could
// then kill a healthy server in the middle of a test.
func spawn(cmd *exec.Cmd, logFile string) (*process, error) {
	out, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// The child gets its own copy of the descriptor: a file, not a pipe, so
	// os/exec starts no copying goroutine and Wait does not depend on one.
	defer out.Close()
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()

	p := &process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Never unlocked: when this goroutine returns the runtime ends the
		// thread, which is harmless because the child is gone by then.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait() // the exit status is not interesting; reaping is
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// pid returns the process ID.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited and been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
