package workers

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestGoNeverWaitsForABusyWorker: tasks that block until all of them run
// prove that each got a worker of its own.
func TestGoNeverWaitsForABusyWorker(t *testing.T) {
	p := newPool(time.Minute)
	defer p.Close()
	const n = 50
	var started sync.WaitGroup
	started.Add(n)
	release := make(chan struct{})
	for i := 0; i < n; i++ {
		p.Go(func() {
			started.Done()
			<-release
		})
	}
	started.Wait() // would hang if a task waited for another
	close(release)
}

// TestWorkersAreReused: sequential tasks run on the worker the first one
// started, which is what keeps its stack.
func TestWorkersAreReused(t *testing.T) {
	p := newPool(time.Minute)
	defer p.Close()
	done := make(chan struct{})
	for i := 0; i < 100; i++ {
		p.Go(func() { done <- struct{}{} })
		<-done
		// The worker sends on done before it goes back to waiting: wait until
		// it says it is idle again, so the next Go can hand it the task.
		waitFor(t, func() bool { return p.waiting.Load() >= 1 })
	}
	// It says so just before it parks; a Go that lands in between starts
	// another worker, hence the margin. Without reuse this would be 100.
	if got := p.started.Load(); got >= 10 {
		t.Fatalf("100 tasks one after another started %d workers, want 1 (a few at most)", got)
	}
}

// TestIdleWorkersEnd: a worker with nothing to do ends by itself, and the
// next task starts a new one.
func TestIdleWorkersEnd(t *testing.T) {
	p := newPool(10 * time.Millisecond)
	defer p.Close()
	var ran atomic.Int32
	p.Go(func() { ran.Add(1) })
	waitFor(t, func() bool { return p.alive.Load() == 0 })
	p.Go(func() { ran.Add(1) })
	waitFor(t, func() bool { return ran.Load() == 2 })
	if got := p.started.Load(); got != 2 {
		t.Fatalf("started %d workers, want 2 (the first should have ended)", got)
	}
}

// TestCloseWaitsForTasksAndThenRunsInTheCaller: Close returns only after
// the tasks under way; afterwards Go runs the task before it returns.
func TestCloseWaitsForTasksAndThenRunsInTheCaller(t *testing.T) {
	p := newPool(time.Minute)
	release := make(chan struct{})
	var finished atomic.Bool
	p.Go(func() {
		<-release
		finished.Store(true)
	})
	closed := make(chan struct{})
	go func() {
		p.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a task was running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-closed
	if !finished.Load() {
		t.Fatal("Close returned before the task finished")
	}
	ran := false
	p.Go(func() { ran = true })
	if !ran {
		t.Fatal("Go after Close did not run the task in the caller")
	}
	p.Close() // a second Close is harmless
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
