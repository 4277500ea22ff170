package dlockgocron

import (
	"context"
	"fmt"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/dlock-go/dlock"
)

// DefaultMinHold is how long a Locker's lock stays held after a run, at
// least: longer than the skew between the schedulers' clocks and timers,
// so that a scheduler firing the same tick a moment later finds the lock
// still held and skips the run, and shorter than the jobs' interval, so
// that the next tick finds it free. Set WithMinHold for jobs that run more
// often than every second, or schedulers further apart.
const DefaultMinHold = 500 * time.Millisecond

// NewLocker returns a gocron.Locker that runs each tick of a job on one
// scheduler only: the first to fire takes the job's lock (a dlock Mutex
// named after the job, through c), the others skip the tick. The lock is
// kept for at least DefaultMinHold after it is taken, even when the run
// ends sooner (dlock.WithMinHold; opts may set another). Give the jobs of
// every scheduler the same start (gocron.WithStartAt) so that their ticks
// coincide. See docs/guide.md, "Once across hosts". A nil Client or an
// invalid option makes every Lock fail with dlock.ErrInvalidArgument.
func NewLocker(c *dlock.Client, opts ...dlock.Option) gocron.Locker {
	return &locker{c: c, opts: append([]dlock.Option{dlock.WithMinHold(DefaultMinHold)}, opts...)}
}

type locker struct {
	c    *dlock.Client
	opts []dlock.Option
}

// Lock takes the lock of the job called key for this tick, or returns an
// error (dlock.ErrNotObtained when another scheduler has it): gocron then
// skips the run.
func (l *locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	if l.c == nil {
		return nil, fmt.Errorf("dlockgocron: Lock %q: nil Client: %w", key, dlock.ErrInvalidArgument)
	}
	lease, err := l.c.Mutex(key, l.opts...).TryLock(ctx)
	if err != nil {
		return nil, err
	}
	return lease, nil
}
