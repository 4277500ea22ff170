package dlockgocron

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/dlock-go/dlock"
)

// ErrNotLeader is what an Elector's IsLeader returns while another
// scheduler leads: gocron then skips the job on this one.
var ErrNotLeader = errors.New("dlockgocron: this scheduler is not the leader")

// Elector is a gocron.Elector backed by a dlock.Election: it campaigns in
// the background, and IsLeader reports whether this scheduler leads.
type Elector struct {
	cur    atomic.Pointer[dlock.Leadership]
	failed atomic.Pointer[error] // why it can never lead, when set
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector campaigns in c's election called name, publishing value (for
// Election.Leader and Observe), until ctx ends or stop is called; stop
// then resigns a leadership held and waits for the campaign to end. opts
// set the election's lock options: its TTL is how long the schedule stays
// with a leader that died before another takes it. A nil Client or an
// invalid name or option makes IsLeader report that error, and the
// Elector never leads.
func NewElector(ctx context.Context, c *dlock.Client, name, value string, opts ...dlock.Option) (el *Elector, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	el = &Elector{cancel: cancel, done: make(chan struct{})}
	if c == nil {
		el.fail(fmt.Errorf("dlockgocron: NewElector: nil Client: %w", dlock.ErrInvalidArgument))
		close(el.done)
		return el, el.Stop
	}
	go el.campaign(ctx, c.Election(name, opts...), value)
	return el, el.Stop
}

// IsLeader returns nil while this scheduler leads, and an error matching
// ErrNotLeader otherwise. It checks the leadership's lease at the call
// (Leadership.Err), so a leader whose lease ran out does not run a job.
func (el *Elector) IsLeader(context.Context) error {
	if err := el.failed.Load(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotLeader, *err)
	}
	ld := el.cur.Load()
	if ld == nil {
		return ErrNotLeader
	}
	if err := ld.Err(); err != nil {
		return fmt.Errorf("%w: %v", ErrNotLeader, err)
	}
	return nil
}

func (el *Elector) fail(err error) {
	el.failed.Store(&err)
}

// Stop ends the campaign and resigns a leadership held, and waits for
// both. Later calls return at once.
func (el *Elector) Stop() {
	el.once.Do(el.cancel)
	<-el.done
}

// campaign leads, or waits to, until ctx ends; after a loss it campaigns
// again.
func (el *Elector) campaign(ctx context.Context, e *dlock.Election, value string) {
	defer close(el.done)
	for retry := 10 * time.Millisecond; ctx.Err() == nil; {
		ld, err := e.Campaign(ctx, value)
		if errors.Is(err, dlock.ErrInvalidArgument) {
			el.fail(fmt.Errorf("dlockgocron: NewElector: %w", err)) // a bad name or option: retrying cannot help
			return
		}
		if err != nil {
			// Redis failed beyond what a wait retries, or the Client
			// closed: try again after a pause, until ctx ends.
			select {
			case <-time.After(retry):
			case <-ctx.Done():
			}
			retry = min(2*retry, 5*time.Second)
			continue
		}
		retry = 10 * time.Millisecond
		el.cur.Store(ld)
		select {
		case <-ld.Done():
		case <-ctx.Done():
		}
		el.cur.Store(nil)
		if ctx.Err() != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = ld.Resign(rctx)
			cancel()
		}
	}
}
