//go:build linux

package dlock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/chaos"
	"github.com/dlock-go/dlock/internal/redistest"
)

const chaosSpecEnv = "DLOCK_CHAOS_SPEC"

func init() {
	// A worker process: it runs the spec, streaming its events on stdout
	// (chaos.Encoder lines), and exits.
	registerChildMode("chaos-worker", func(ctx context.Context, _ *dlock.Client, _ string, _ func()) error {
		var spec chaosSpec
		if err := json.Unmarshal([]byte(os.Getenv(chaosSpecEnv)), &spec); err != nil {
			return fmt.Errorf("bad %s: %w", chaosSpecEnv, err)
		}
		if m := os.Getenv(chaosMutantEnv); m != "" {
			install := chaosMutants[m]
			if install == nil {
				return fmt.Errorf("unknown mutant %q", m)
			}
			install()
		}
		enc := chaos.NewEncoder(os.Stdout)
		rec := &chaos.Recorder{Sink: func(e chaos.Event) { _ = enc.Encode(e) }}
		if err := runChaosWorker(ctx, spec, rec); err != nil {
			return err
		}
		fmt.Println("chaos-done")
		os.Exit(0)
		return nil
	})
}

// chaosChild is a worker process started by startChaosChild.
type chaosChild struct {
	t    testing.TB
	spec chaosSpec
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and its output is read
	err  error         // the process's exit error, set before done closes

	mu      sync.Mutex
	events  chaos.History
	changed chan struct{} // closed and replaced on every new event
	stderr  strings.Builder
}

// startChaosChild starts a worker process running spec, whose events go to
// rec as they arrive. The process is killed at the end of the test if it is
// still running.
func startChaosChild(t testing.TB, spec chaosSpec, rec *chaos.Recorder) *chaosChild {
	t.Helper()
	if !chaos.SystemWide {
		t.Skip("child workers need a system-wide monotonic clock (Linux)")
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childModeEnv+"=chaos-worker", childAddrEnv+"="+spec.Addrs[0],
		chaosSpecEnv+"="+string(b), chaosMutantEnv+"="+spec.Mutant)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ch := &chaosChild{t: t, spec: spec, cmd: cmd, done: make(chan struct{}), changed: make(chan struct{})}
	cmd.Stderr = &lockedWriter{mu: &ch.mu, b: &ch.stderr}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// As redistest does for servers: fork from a goroutine locked to its own
	// thread that then waits for the child, so that Pdeathsig (sent when the
	// forking thread ends) kills the child only with this test binary.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		decodeErr := chaos.Decode(stdout, func(e chaos.Event) {
			rec.AddAll(chaos.History{e})
			ch.mu.Lock()
			ch.events = append(ch.events, e)
			close(ch.changed)
			ch.changed = make(chan struct{})
			ch.mu.Unlock()
		}, nil)
		ch.err = errors.Join(cmd.Wait(), decodeErr)
		close(ch.done)
	}()
	if err := <-started; err != nil {
		t.Fatalf("starting worker %s: %v", spec.Proc, err)
	}
	t.Cleanup(func() {
		ch.signal(syscall.SIGCONT)
		ch.signal(syscall.SIGKILL)
		<-ch.done
	})
	return ch
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// waitEvent waits until the child has sent an event that matches keep and
// returns it; it fails the test after timeout or if the child exits first.
func (ch *chaosChild) waitEvent(keep func(chaos.Event) bool, timeout time.Duration, what string) chaos.Event {
	ch.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	seen := 0
	for {
		ch.mu.Lock()
		events, changed := ch.events, ch.changed
		ch.mu.Unlock()
		for ; seen < len(events); seen++ {
			if keep(events[seen]) {
				return events[seen]
			}
		}
		select {
		case <-changed:
		case <-ch.done:
			ch.mu.Lock()
			more := len(ch.events) > seen
			ch.mu.Unlock()
			if !more {
				ch.t.Fatalf("worker %s exited (%v) before %s; stderr: %s", ch.spec.Proc, ch.err, what, ch.stderrText())
			}
		case <-deadline.C:
			ch.t.Fatalf("worker %s: no %s within %v; stderr: %s", ch.spec.Proc, what, timeout, ch.stderrText())
		}
	}
}

// wait waits for the child to exit by itself and fails the test if it
// fails or takes longer than timeout.
func (ch *chaosChild) wait(timeout time.Duration) {
	ch.t.Helper()
	select {
	case <-ch.done:
		if ch.err != nil {
			ch.t.Errorf("worker %s: %v; stderr: %s", ch.spec.Proc, ch.err, ch.stderrText())
		}
	case <-time.After(timeout):
		ch.t.Fatalf("worker %s still running after %v; stderr: %s", ch.spec.Proc, timeout, ch.stderrText())
	}
}

func (ch *chaosChild) stderrText() string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.stderr.String()
}

func (ch *chaosChild) signal(sig syscall.Signal) {
	select {
	case <-ch.done:
	default:
		_ = ch.cmd.Process.Signal(sig)
	}
}

// pause stops the child with SIGSTOP and returns once the kernel reports it
// stopped.
func (ch *chaosChild) pause() {
	ch.t.Helper()
	ch.signal(syscall.SIGSTOP)
	if err := redistest.WaitStopped(ch.cmd.Process.Pid, 5*time.Second); err != nil {
		ch.t.Fatal(err)
	}
}

// resume continues a paused child.
func (ch *chaosChild) resume() { ch.signal(syscall.SIGCONT) }

// kill sends SIGKILL and waits until the child is reaped.
func (ch *chaosChild) kill() {
	ch.signal(syscall.SIGKILL)
	<-ch.done
}
