package hold

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock/internal/errs"
)

// OnLoss arranges for f to be called with the loss error if the lease is
// lost; at once if it already was. It returns the id DropLoss takes.
func (l *Lease) OnLoss(f func(error)) LossID {
	l.wd.mu.Lock()
	if err := l.err; err != nil {
		l.wd.mu.Unlock()
		f(err)
		return 0
	}
	l.wd.lossSeq++
	id := l.wd.lossSeq
	if l.lossFuncs == nil {
		l.lossFuncs = l.lossSlots[:0]
	}
	l.lossFuncs = append(l.lossFuncs, lossFunc{id: id, f: f})
	if len(l.lossFuncs) > len(l.lossSlots) {
		// On the heap now: the slots must not keep what they held.
		clear(l.lossSlots[:])
	}
	l.wd.mu.Unlock()
	return id
}

// DropLoss cancels what OnLoss arranged, if it is still to come. A lease
// that outlives many of the things that watch it (a reentrant owner's
// renewal, under nested holds that come and go) must not keep them all.
func (l *Lease) DropLoss(id LossID) {
	if id == 0 {
		return
	}
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	for i, lf := range l.lossFuncs {
		if lf.id == id {
			last := len(l.lossFuncs) - 1
			copy(l.lossFuncs[i:], l.lossFuncs[i+1:])
			l.lossFuncs[last] = lossFunc{} // the slice's tail must not keep f
			l.lossFuncs = l.lossFuncs[:last]
			return
		}
	}
}

// lossFunc is a loss callback, with the id that OnLoss gave it.
type lossFunc struct {
	id LossID
	f  func(error)
}

// LossID names a loss callback of a lease; 0 none.
type LossID uint64

// runLoss runs the loss callbacks that loseLocked returned, with the loss.
func (l *Lease) runLoss(funcs []func(error)) {
	if len(funcs) == 0 {
		return
	}
	err := l.Lost()
	for _, f := range funcs {
		f(err)
	}
}

// loseLocked marks the lease lost, stops watching it and closes Done. It
// returns the loss callbacks, then Host.Lost, for the caller to run after
// unlocking wd.mu: a slow handler must not stall every lease of the Client.
func (l *Lease) loseLocked(reason string) []func(error) {
	if l.err != nil || l.state == released {
		return nil
	}
	l.err = fmt.Errorf("%w: %q: %s", errs.ErrLockLost, l.host.Name(), reason)
	if l.heapIndex >= 0 {
		l.wd.leases.remove(l.heapIndex)
	}
	l.closeDoneLocked()
	funcs := make([]func(error), 0, len(l.lossFuncs)+1)
	for _, lf := range l.lossFuncs {
		funcs = append(funcs, lf.f)
	}
	clear(l.lossFuncs) // the slots must not keep the callbacks
	l.lossFuncs = nil
	if l.kin != nil && l.parent == nil {
		funcs = append(funcs, l.loseKinLocked(l.err)...)
	}
	host := l.host
	return append(funcs, func(err error) { host.Lost(err, reason) })
}

// Lose declares the lease lost and runs its loss callbacks.
func (l *Lease) Lose(reason string) {
	l.wd.mu.Lock()
	funcs := l.loseLocked(reason)
	l.wd.mu.Unlock()
	l.runLoss(funcs)
}

// LoseIfHeld is Lose for a lease still held; false when it is being
// unlocked or was released meanwhile.
func (l *Lease) LoseIfHeld(reason string) bool {
	l.wd.mu.Lock()
	if l.state != held {
		l.wd.mu.Unlock()
		return false
	}
	funcs := l.loseLocked(reason)
	l.wd.mu.Unlock()
	l.runLoss(funcs)
	return true
}

// Retire ends a lease whose lock was released by other means (the last
// hold of a reentrant lock, released through a nested lease): it stops
// watching it and closes Done, sending nothing.
func (l *Lease) Retire() {
	if l.BeginUnlock(context.Background(), true) == nil {
		l.EndUnlock(nil)
	}
}

func (l *Lease) closeDoneLocked() {
	if !l.doneClosed {
		l.doneClosed = true
		if l.done != nil {
			close(l.done)
		}
	}
}
