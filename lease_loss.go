package dlock

import (
	"container/heap"
	"context"
	"fmt"
	"log/slog"
)

// lossErr returns the loss, or nil if the lease was not lost.
func (l *Lease) lossErr() error {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	return l.err
}

// lostInEndNow reports whether a failed release ended the lease (a retried
// Unlock is under way).
func (l *Lease) lostInEndNow() bool {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	return l.lostInEnd
}

// releasedByUnlock reports whether an Unlock of the lease released its lock.
func (l *Lease) releasedByUnlock() bool {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	return l.state == leaseReleased && l.err == nil
}

// unlocking reports whether an Unlock of the lease is under way.
func (l *Lease) unlocking() bool {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	return l.state == leaseUnlocking
}

// lostWhileHeld returns the loss, if any, unless a failed Unlock declared
// it: the lock was then held until the release was sent.
func (l *Lease) lostWhileHeld() error {
	l.wd.mu.Lock()
	defer l.wd.mu.Unlock()
	if l.lostInEnd {
		return nil
	}
	return l.err
}

// onLoss arranges for f to be called with the loss error if the lease is
// lost; at once if it already was. It returns the id dropLoss takes.
func (l *Lease) onLoss(f func(error)) lossID {
	l.wd.mu.Lock()
	if err := l.err; err != nil {
		l.wd.mu.Unlock()
		f(err)
		return 0
	}
	l.wd.lossSeq++
	id := l.wd.lossSeq
	l.lossFuncs = append(l.lossFuncs, lossFunc{id: id, f: f})
	l.wd.mu.Unlock()
	return id
}

// dropLoss cancels what onLoss arranged, if it is still to come. A lease
// that outlives many of the things that watch it (a reentrant owner's
// renewal, under nested holds that come and go) must not keep them all.
func (l *Lease) dropLoss(id lossID) {
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

// lossFunc is a loss callback, with the id that onLoss gave it.
type lossFunc struct {
	id lossID
	f  func(error)
}

// lossID names a loss callback of a lease; 0 none.
type lossID uint64

func runLossFuncs(funcs []func(error), l *Lease) {
	if len(funcs) == 0 {
		return
	}
	err := l.lossErr()
	for _, f := range funcs {
		f(err)
	}
}

// loseLocked marks a lease lost, stops watching it and closes Done. It
// returns the loss callbacks for the caller to run after unlocking w.mu.
func (w *watchdog) loseLocked(l *Lease, reason string) []func(error) {
	if l.err != nil || l.state == leaseReleased {
		return nil
	}
	l.err = fmt.Errorf("%w: %q: %s", ErrLockLost, l.Name(), reason)
	if l.heapIndex >= 0 {
		heap.Remove(&w.leases, l.heapIndex)
	}
	l.closeDoneLocked()
	funcs := make([]func(error), 0, len(l.lossFuncs)+2)
	for _, lf := range l.lossFuncs {
		funcs = append(funcs, lf.f)
	}
	l.lossFuncs = nil
	if o := l.cfg.observer; o != nil {
		info := l.info()
		funcs = append(funcs, func(err error) { o.Lost(info, err) })
	}
	// Logged with the callbacks, after w.mu is released: a slow handler
	// must not stall every lease of the Client.
	logger, name, kind, token := l.cfg.logger, l.Name(), l.kind, l.token
	funcs = append(funcs, func(error) {
		logger.Warn("dlock: lock lost", slog.String("lock", name), slog.String("kind", string(kind)),
			slog.Int64("token", token), slog.String("reason", reason))
	})
	return funcs
}

// lose declares a lease lost and runs its loss callbacks.
func (w *watchdog) lose(l *Lease, reason string) {
	w.mu.Lock()
	funcs := w.loseLocked(l, reason)
	w.mu.Unlock()
	runLossFuncs(funcs, l)
}

// loseIfHeld is lose for a lease still held; false when it is being
// unlocked or was released meanwhile.
func (w *watchdog) loseIfHeld(l *Lease, reason string) bool {
	w.mu.Lock()
	if l.state != leaseHeld {
		w.mu.Unlock()
		return false
	}
	funcs := w.loseLocked(l, reason)
	w.mu.Unlock()
	runLossFuncs(funcs, l)
	return true
}

// retire ends a lease whose lock was released by other means (the last
// hold of a reentrant lock, released through a nested lease): it stops
// watching it and closes Done, sending nothing.
func (w *watchdog) retire(l *Lease) {
	if w.beginUnlock(context.Background(), l, true) == nil {
		w.endUnlock(l, nil)
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
