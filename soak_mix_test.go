package dlock_test

import (
	"context"
	"errors"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// soakCycle runs one cycle of the mix on name: c is the service's Client,
// rival another process's. Cycle i runs scenario i%16 of the mix, or
// beyond its ten a plain TryLock or Lock.
func soakCycle(ctx context.Context, _ *testing.T, i int, c, rival *dlock.Client, name string, ops *soakOps, rnd *rand.Rand) {
	m := soakMix{ctx: ctx, c: c, rival: rival, ops: ops, rnd: rnd}
	switch i % 16 {
	case 0:
		m.heldElsewhere(name)
	case 1:
		m.cancelledMidFlight(name)
	case 2:
		m.localContention(name)
	case 3:
		m.reentrantNesting(name)
	case 4:
		m.semaphoreOverbooked(name)
	case 5:
		m.readersAndAWriter(name)
	case 6:
		m.fairHeldElsewhere(name)
	case 7:
		m.do(name)
	case 8:
		m.multiLockHalfHeld(name)
	case 9:
		m.latch(name)
	default:
		if i%2 == 0 {
			m.unlock(c.Mutex(name).TryLock(ctx))
		} else {
			m.unlock(c.Mutex(name).Lock(ctx))
		}
	}
}

// soakMix is the soak's mix of what a service does with its locks. Its
// scenarios count what happened in ops and ignore the errors a connection
// reset may cause.
type soakMix struct {
	ctx      context.Context
	c, rival *dlock.Client
	ops      *soakOps
	rnd      *rand.Rand
}

// ignore counts err's kind and otherwise ignores it: a reset lost a
// release's reply, or the lease, or failed a call.
func (m soakMix) ignore(err error) {
	if err == nil || !errors.Is(err, dlock.ErrNotObtained) {
		return
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		m.ops.timedOut.Add(1)
	case errors.Is(err, context.Canceled):
		m.ops.cancelled.Add(1)
	default:
		m.ops.tryFailed.Add(1)
	}
}

// unlock unlocks l when it was obtained.
func (m soakMix) unlock(l *dlock.Lease, err error) {
	if err == nil {
		m.ops.locked.Add(1)
		m.ignore(l.Unlock(m.ctx))
	} else {
		m.ignore(err)
	}
}

// heldElsewhere: held by another process; a waiter gets it, one times
// out, a TryLock fails.
func (m soakMix) heldElsewhere(name string) {
	held, err := m.rival.Mutex(name).Lock(m.ctx)
	if err != nil {
		m.ignore(err)
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		l, err := m.c.Mutex(name).Lock(m.ctx)
		if err == nil {
			m.ops.waitedAndGot.Add(1)
		}
		m.unlock(l, err)
	}()
	limit := time.Duration(1+m.rnd.Intn(20)) * time.Millisecond
	go func() {
		defer wg.Done()
		tctx, cancel := context.WithTimeout(m.ctx, limit)
		defer cancel()
		m.unlock(m.c.Mutex(name).Lock(tctx))
	}()
	m.unlock(m.c.Mutex(name).TryLock(m.ctx))
	time.Sleep(time.Duration(m.rnd.Intn(3)) * time.Millisecond) // let the waiters queue, or not
	m.ignore(held.Unlock(m.ctx))
	wg.Wait()
}

// cancelledMidFlight: a Lock cancelled at a random moment.
func (m soakMix) cancelledMidFlight(name string) {
	cctx, cancel := context.WithCancel(m.ctx)
	time.AfterFunc(time.Duration(m.rnd.Intn(1500))*time.Microsecond, cancel)
	m.unlock(m.c.Mutex(name).Lock(cctx))
	cancel()
}

// localContention: goroutines of the service contend locally, one gives
// up.
func (m soakMix) localContention(name string) {
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			lctx := m.ctx
			if g == 2 {
				var cancel context.CancelFunc
				lctx, cancel = context.WithTimeout(m.ctx, time.Millisecond)
				defer cancel()
			}
			m.unlock(m.c.Mutex(name).Lock(lctx))
		}(g)
	}
	wg.Wait()
}

// reentrantNesting: a reentrant owner nests three holds in its first.
func (m soakMix) reentrantNesting(name string) {
	rctx := dlock.WithOwner(m.ctx, "job-"+name)
	mu := m.c.ReentrantMutex(name)
	outer, err := mu.Lock(rctx)
	if err != nil {
		m.ignore(err)
		return
	}
	for k := 0; k < 3; k++ {
		m.unlock(mu.Lock(rctx))
	}
	m.unlock(outer, nil)
}

// semaphoreOverbooked: a semaphore with one more acquirer than permits.
func (m soakMix) semaphoreOverbooked(name string) {
	s := m.c.Semaphore(name, 2)
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(m.ctx, 5*time.Millisecond)
			defer cancel()
			p, err := s.Acquire(actx, 1)
			if err == nil {
				m.ops.locked.Add(1)
				m.ignore(p.Release(m.ctx))
			} else {
				m.ignore(err)
			}
		}()
	}
	wg.Wait()
}

// readersAndAWriter: an RWMutex's readers and a writer at once.
func (m soakMix) readersAndAWriter(name string) {
	rw := m.c.RWMutex(name)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); m.unlock(rw.RLock(m.ctx)) }()
	go func() { defer wg.Done(); m.unlock(rw.Lock(m.ctx)) }()
	m.unlock(rw.TryRLock(m.ctx))
	wg.Wait()
}

// fairHeldElsewhere: a FairMutex held by another process, with a waiter
// that times out.
func (m soakMix) fairHeldElsewhere(name string) {
	held, err := m.rival.FairMutex(name).Lock(m.ctx)
	if err != nil {
		m.ignore(err)
		return
	}
	done := make(chan struct{})
	limit := time.Duration(1+m.rnd.Intn(10)) * time.Millisecond
	go func() {
		defer close(done)
		tctx, cancel := context.WithTimeout(m.ctx, limit)
		defer cancel()
		m.unlock(m.c.FairMutex(name).Lock(tctx))
	}()
	time.Sleep(time.Duration(m.rnd.Intn(3)) * time.Millisecond)
	m.ignore(held.Unlock(m.ctx))
	<-done
}

// do: Client.Do.
func (m soakMix) do(name string) {
	m.ignore(m.c.Do(m.ctx, name, func(context.Context) error { return nil }))
}

// multiLockHalfHeld: a MultiLock whose second name another process holds;
// one wait times out.
func (m soakMix) multiLockHalfHeld(name string) {
	held, err := m.rival.Mutex(name + ":b").Lock(m.ctx)
	if err != nil {
		m.ignore(err)
		return
	}
	ml := m.c.MultiLock(name+":a", name+":b")
	tctx, cancel := context.WithTimeout(m.ctx, time.Duration(1+m.rnd.Intn(10))*time.Millisecond)
	m.unlock(ml.Lock(tctx))
	cancel()
	m.unlock(ml.TryLock(m.ctx))
	m.ignore(held.Unlock(m.ctx))
	m.unlock(ml.Lock(m.ctx))
}

// latch: a latch counted down while a waiter waits, one wait cancelled.
func (m soakMix) latch(name string) {
	l := m.c.Latch(name, dlock.WithTTL(time.Minute))
	if _, err := l.TrySetCount(m.ctx, 1); err != nil {
		m.ignore(err)
		return
	}
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		m.ignore(l.Wait(m.ctx))
	}()
	wctx, cancel := context.WithTimeout(m.ctx, time.Millisecond)
	m.ignore(l.Wait(wctx))
	cancel()
	m.ignore(l.CountDown(m.ctx))
	<-waited
}
