package hold

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Recorder is a Holder that records when its holds began, for inspection
// (docs/guide.md, "How long a holder has held a lock"). The Watchdog sends
// its calls along a batch of renewals, so that neither the grant nor the
// release pays for them.
type Recorder interface {
	// RecordCalls returns the calls that record that owner's hold began
	// age ago, the record kept for retention unless recorded again.
	RecordCalls(owner string, age, retention time.Duration) []*driver.Call
}

// recordRetention is how long a record lives unless recorded again; a
// lease records again after half of it. Like a fencing counter's
// retention, it is far longer than most holds, so a hold is recorded once.
func recordRetention(ttl time.Duration) time.Duration { return max(time.Hour, 2*ttl) }

// recordCallsLocked returns the calls that record when l's hold began, if
// a renewal sent at now should carry them: once the hold is a quarter of
// its TTL old (the Watchdog's first renewal comes a third of the TTL after
// the grant; a hand-off's claim, which comes at once, is left out), and
// again after half the retention.
func (l *Lease) recordCallsLocked(now time.Time) []*driver.Call {
	r, ok := l.host.Holder().(Recorder)
	age, retention := now.Sub(l.grantedAt), recordRetention(l.ttl)
	if !ok || l.grantedAt.IsZero() || age < l.ttl/4 || !l.recordedAt.IsZero() && now.Sub(l.recordedAt) < retention/2 {
		return nil
	}
	return r.RecordCalls(l.owner, age, retention)
}

// recorded reports whether calls, a record's, were made and all succeeded.
func recorded(calls []*driver.Call) bool {
	for _, c := range calls {
		if c.Err != nil {
			return false
		}
	}
	return len(calls) > 0
}

// recordTimeout bounds a batch's records. A record refused for longer (a
// slot migration answers TRYAGAIN until it ends) is sent again with the
// lease's next renewal.
const recordTimeout = time.Second

// record sends the records of when holds began that the batch's leases
// were due (recordCallsLocked), once its renewals were applied: a record
// refused for a while must not hold them up.
func (w *Watchdog) record(b *renewBatch, start time.Time) {
	var calls []*driver.Call
	for i := range b.items {
		calls = append(calls, b.items[i].record...)
	}
	if len(calls) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(w.ctx, recordTimeout)
	w.drv.Run(ctx, calls...)
	cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range b.items {
		if recorded(b.items[i].record) {
			b.items[i].l.recordedAt = start
		}
	}
}
