package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
)

// held is what a run holds: a mutex's lease or a semaphore's permits.
type held struct {
	token   int64
	done    <-chan struct{}
	err     func() error
	release func(context.Context) error
}

func leaseHeld(l *dlock.Lease) *held {
	return &held{token: l.Token(), done: l.Done(), err: l.Err, release: l.Unlock}
}

func permitsHeld(p *dlock.Permits) *held {
	return &held{token: p.Token(), done: p.Done(), err: p.Err, release: p.Release}
}

// acquireForRun takes the lock as o says. A signal on sigs ends the wait;
// it is returned, and nothing is held then.
func (a *app) acquireForRun(parent context.Context, c *dlock.Client, o *runOptions, name string, sigs <-chan os.Signal) (*held, os.Signal, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	if o.waitSet && o.wait > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeout(ctx, o.wait)
		defer cancelTimeout()
	}
	var got os.Signal
	stop, watching := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watching)
		select {
		case got = <-sigs:
			cancel()
		case <-stop:
		}
	}()
	h, err := a.acquire(ctx, c, o, name)
	close(stop)
	<-watching
	switch {
	case got == nil && parent.Err() != nil:
		// main cancels parent on SIGINT and SIGTERM, which reach sigs too,
		// from the same delivery but possibly a moment after the wait
		// ended: wait for it, so that the exit status names the signal.
		select {
		case got = <-sigs:
		case <-time.After(time.Second):
		}
	case got == nil:
		select {
		case got = <-sigs: // arrived while the lock was granted
		default:
		}
	}
	if got != nil {
		if h != nil {
			_ = h.release(context.Background())
		}
		return nil, got, nil
	}
	return h, nil, err
}

func (a *app) acquire(ctx context.Context, c *dlock.Client, o *runOptions, name string) (*held, error) {
	wait := !o.noWait && !(o.waitSet && o.wait == 0)
	if o.permits > 0 {
		sem := c.Semaphore(name, o.permits)
		var p *dlock.Permits
		var err error
		if wait {
			p, err = sem.Acquire(ctx, 1)
		} else {
			p, err = sem.TryAcquire(ctx, 1)
		}
		if err != nil {
			return nil, err
		}
		return permitsHeld(p), nil
	}
	m := c.Mutex(name)
	var l *dlock.Lease
	var err error
	if wait {
		l, err = m.Lock(ctx)
	} else {
		l, err = m.TryLock(ctx)
	}
	if err != nil {
		return nil, err
	}
	return leaseHeld(l), nil
}

// waitFailure returns the Redis failure that a wait for the lock ended
// with, or nil when it ended in contention. err matches dlock.ErrNotObtained:
// the library joins into it, next to the context's error, the error of the
// wait's last attempt when that failed (it forgets earlier failures once
// an attempt gets an answer). The context here has no cause of its own, so
// any other error among them is that failure.
func waitFailure(err error) error {
	multi, ok := err.(interface{ Unwrap() []error })
	if !ok {
		if next := errors.Unwrap(err); next != nil {
			return waitFailure(next)
		}
		return nil
	}
	for _, e := range multi.Unwrap() {
		switch {
		case errors.Is(e, context.Canceled), errors.Is(e, context.DeadlineExceeded), errors.Is(e, dlock.ErrClosed):
		case errors.Is(e, dlock.ErrNotObtained):
			if f := waitFailure(e); f != nil {
				return f
			}
		default:
			return e
		}
	}
	return nil
}

// holdersTimeout bounds the Inspect that names a lock's holders after a
// failed attempt: the detail must not hold up --wait's deadline for long.
const holdersTimeout = 300 * time.Millisecond

// notObtained explains why the lock was not obtained, naming its holders.
func (a *app) notObtained(c *dlock.Client, o *runOptions, name string) error {
	how := "not waiting (--no-wait)"
	switch {
	case o.waitSet && o.wait > 0:
		how = fmt.Sprintf("gave up after --wait %v", o.wait)
	case o.waitSet:
		how = "not waiting (--wait 0)"
	}
	kind, what, by := dlock.KindMutex, fmt.Sprintf("%q is held", name), " by "
	if o.permits > 0 {
		kind, what, by = dlock.KindSemaphore, fmt.Sprintf("%q has no free permit (of %d)", name, o.permits), ": held by "
	}
	ctx, cancel := context.WithTimeout(context.Background(), holdersTimeout)
	defer cancel()
	infos, err := c.Inspect(ctx, name)
	if err != nil {
		what += fmt.Sprintf(" (by whom is unknown: %s)", message(err))
	}
	for _, info := range infos {
		if info.Kind == kind && len(info.Holders) > 0 {
			what += by + holderList(info.Holders)
		}
	}
	return fmt.Errorf("%s; %s", what, how)
}

// holderList describes holders in a sentence: "host=a pid=1 (12s left)".
func holderList(holders []dlock.Holder) string {
	var parts []string
	for i, h := range holders {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("%d more", len(holders)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%s left)", ownerLabel(h.Owner, h.Info), formatTTL(h.TTL)))
	}
	return strings.Join(parts, ", ")
}

// release gives the lock up after the command. It returns the loss when
// the lock turned out to have been lost (ErrNotHeld): the command then ran
// unprotected for a while. lostKnown says the loss was told already, while
// the command ran, so it is not told again. A release that fails otherwise
// is only reported: the lock expires within its TTL.
func (a *app) release(name string, h *held, o *runOptions, lostKnown bool) error {
	err := h.release(context.Background()) // bounded by the release timeout
	switch {
	case err == nil:
		if o.verbose {
			fmt.Fprintf(a.stderr, "dlock: released %q\n", name)
		}
		return nil
	case errors.Is(err, dlock.ErrNotHeld):
		// Expired or taken away after the last renewal: the command may
		// have run unprotected at its end.
		lost := fmt.Errorf("%q was lost before the command ended: %s", name, message(err))
		if !lostKnown {
			fmt.Fprintf(a.stderr, "dlock: %v\n", lost)
		}
		return lost
	}
	fmt.Fprintf(a.stderr, "dlock: warning: could not release %q: %s (it expires within its TTL)\n", name, message(err))
	return nil
}
