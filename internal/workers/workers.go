// Package workers runs short tasks on goroutines that are kept between
// tasks.
//
// A goroutine starts with a small stack; a task that goes down go-redis's
// call path grows it several times, and each growth copies the stack. Done
// on a fresh goroutine for every call, as a fan-out to several Redis nodes
// or a call that must be able to return at its deadline does, the copying
// cost more client CPU than the call itself (a third of a Redlock
// lock+unlock in a profile). A worker kept between tasks keeps its grown
// stack. See docs/design.md, "Goroutines kept between calls".
package workers

import (
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs tasks on its workers, starting one whenever none is idle, so Go
// never waits for another task to finish. A worker that ran no task for an
// idle period ends, so a burst leaves no goroutines behind for long. The
// owner calls Close, which ends the idle workers and waits for the busy
// ones. Pool is safe for concurrent use.
type Pool struct {
	tasks chan func() // unbuffered: a send succeeds only when a worker is idle
	quit  chan struct{}
	idle  time.Duration

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup

	// For tests: workers started so far, alive now, and idle now.
	started, alive, waiting atomic.Int32
}

// Idle is how long a worker waits for another task before it ends: long
// enough to outlast the gaps of a steady load, short enough that a burst's
// workers are gone soon after it.
const Idle = 10 * time.Second

// New returns a Pool whose workers end after Idle without a task.
func New() *Pool { return newPool(Idle) }

func newPool(idle time.Duration) *Pool {
	return &Pool{tasks: make(chan func()), quit: make(chan struct{}), idle: idle}
}

// Go runs task on an idle worker, or on a new one when none is idle. After
// Close, it runs task in the caller.
func (p *Pool) Go(task func()) {
	select {
	case p.tasks <- task:
		return
	default:
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		task()
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	p.started.Add(1)
	p.alive.Add(1)
	go p.work(task)
}

// work runs task, then the tasks handed to it, until it has been idle for a
// whole period or the pool closes.
func (p *Pool) work(task func()) {
	defer p.wg.Done()
	defer p.alive.Add(-1)
	task()
	// One timer per worker, not reset per task: a period in which the worker
	// ran a task starts another; a period without one ends the worker (after
	// between one and two idle periods without work).
	idle := time.NewTimer(p.idle)
	defer idle.Stop()
	busy := false
	for {
		p.waiting.Add(1)
		select {
		case task := <-p.tasks:
			p.waiting.Add(-1)
			task()
			busy = true
		case <-idle.C:
			p.waiting.Add(-1)
			if !busy {
				return
			}
			busy = false
			idle.Reset(p.idle)
		case <-p.quit:
			p.waiting.Add(-1)
			return
		}
	}
}

// Close ends the idle workers and waits for the tasks under way. Tasks
// given to Go afterwards run in their caller.
func (p *Pool) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.quit)
	}
	p.mu.Unlock()
	p.wg.Wait()
}
