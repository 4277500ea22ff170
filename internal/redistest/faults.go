package redistest

import (
	"errors"
	"syscall"
	"time"
)

// Running reports whether the process is alive (paused counts as alive).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}

// Kill sends SIGKILL and waits until the process is reaped, as a crash
// would. Without WithPersistence the data is gone. Killing a stopped server
// is a no-op. No other server of this test binary is ever given the port,
// so clients of a killed server meet refused connections until Restart.
func (s *Server) Kill() {
	s.faultInjection("Kill")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.kill()
	}
	s.paused = false
}

// Pause freezes the server with SIGSTOP and returns once the kernel reports
// it stopped: connections stay open but nothing is answered, like a long GC
// pause or a VM freeze. Stop and the test's cleanup resume it first, so a
// test never leaves a stopped process. It panics if the server is not
// running, which is a bug in the test.
func (s *Server) Pause() {
	s.faultInjection("Pause")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		panic("redistest: Pause: " + s.Addr() + " is not running")
	}
	if err := s.proc.cmd.Process.Signal(sigStop); err != nil {
		panic("redistest: Pause: " + err.Error())
	}
	if err := WaitStopped(s.proc.pid(), 5*time.Second); err != nil {
		panic("redistest: Pause: " + err.Error())
	}
	s.paused = true
}

// Resume continues a paused server with SIGCONT. It is a no-op when the
// server is not paused.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resume()
}

func (s *Server) resume() {
	if s.paused && s.proc != nil && !s.proc.exited() {
		_ = s.proc.cmd.Process.Signal(sigCont)
	}
	s.paused = false
}

// Restart kills the server if it is running and starts it again on the same
// port and directory with the same arguments, then waits for PING. Data
// survives only WithPersistence; a cluster node keeps its identity
// (nodes.conf) and a sentinel its rewritten sentinel.conf. It panics, with
// the end of the log, if the server does not come back: Restart has no tb
// to fail, and a harness that cannot restart leaves the test meaningless.
func (s *Server) Restart() {
	s.faultInjection("Restart")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.kill()
	}
	// The old port is usually free at once (Redis sets SO_REUSEADDR), but
	// another test binary may have grabbed it meanwhile: wait for it.
	deadline := time.Now().Add(restartWindow)
	for {
		err := s.launch()
		if err == nil {
			return
		}
		if !errors.Is(err, errPortTaken) || time.Now().After(deadline) {
			panic("redistest: Restart: " + err.Error())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down gracefully (resuming it first if paused) with
// SHUTDOWN NOSAVE NOW, and SIGTERM in case the command did not get through,
// then waits until it is reaped, falling back to SIGKILL after 5 s. The AOF
// is flushed; no RDB is written. Stop is idempotent and is what the test's
// cleanup calls.
func (s *Server) Stop() {
	s.faultInjection("Stop")
	s.stop()
}

func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil || p.exited() {
		return
	}
	if s.paused {
		_ = p.cmd.Process.Signal(sigCont)
		s.paused = false
	}
	// SHUTDOWN acts at once, whereas SIGTERM is only noticed by the next
	// serverCron tick (up to 100 ms at the default hz 10). NOW skips waiting
	// for lagging replicas. The reply is the connection closing.
	if c, err := dialCtl(s.Addr(), s.password, time.Second); err == nil {
		_, _ = c.do("SHUTDOWN", "NOSAVE", "NOW")
		c.close()
	}
	// In case SHUTDOWN did not get through (or was refused): signal too.
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.kill()
	}
}

// faultInjection refuses to break the server that other tests share.
func (s *Server) faultInjection(op string) {
	if s.shared {
		panic("redistest: " + op + " on the Shared server, which other tests use; start your own with redistest.Start")
	}
}
