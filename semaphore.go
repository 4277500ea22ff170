package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// MaxPermits is the largest number of permits a semaphore may have, and so
// the most one acquisition may ask for.
const MaxPermits = 1<<31 - 1

// Semaphore is a distributed counting semaphore: at most its limit of
// permits are held at a time, across every process that uses the same name
// on the same Redis. Get one from Client.Semaphore; it is an immutable
// descriptor, safe for concurrent use, and cheap to create per call.
//
// The limit is the permits given to Client.Semaphore, unless SetPermits or
// AddPermits stored another one in Redis, which then applies to every
// process. Each acquisition's permits are a lease like a lock's: renewed by
// the watchdog, returned by Release, and back within one TTL when their
// holder crashes. Waiters are served strictly in arrival order: a release
// grants permits to the first waiter if its request fits and stops at the
// first that does not, so a large request is never starved by smaller ones.
// A Client's goroutines acquiring all the permits share one place in the
// queue and may be passed them directly, a bounded number of times in a
// row, as a Mutex's waiters are (docs/waiting.md).
type Semaphore struct {
	c       *Client
	name    string
	permits int
	cfg     config
	ms      protocol.Timings // computed with the descriptor: calls point at them
	// settings are permits and timings as the acquire and release scripts
	// take them (protocol.AppendSemSettings), built once with the
	// descriptor, in the allocation of its keys.
	settings string
	keys     semKeys
	err      error // invalid name, permits or option, reported on first use
}

// queueTimings are a queued lock's timings for cfg as its scripts take
// them: the RWMutex's, and the Semaphore's with its limit's retention.
func queueTimings(cfg *config) protocol.Timings {
	return protocol.Timings{
		TTL:            cfg.initialPX().Milliseconds(),
		WaiterLease:    cfg.waiterLease.Milliseconds(),
		ClaimWindow:    cfg.claimWindow().Milliseconds(),
		FenceRetention: fenceRetention(cfg.ttl).Milliseconds(),
		LimitRetention: semLimitRetention(cfg.ttl).Milliseconds(),
	}
}

// semKeys names the keys of one semaphore (see sem_lib.lua), all under the
// hash tag {name} and apart from a lock of the same name.
type semKeys struct {
	holders string // zset owner -> expiry of its permits (server ms)
	counts  string // hash owner -> "<permits> <fence>"
	limit   string // the limit SetPermits or AddPermits stored, if any
	fence   string // last fencing token issued
	queue   string // waiting owners by arrival
	waiters string // waiting owners' leases and requests
	// all are the six keys above, the scripts' KEYS, in an array so that
	// they live in the descriptor's own allocation.
	all [6]string
	// calls remembers AddPermits's recent call ids. Only AddPermits touches
	// it, so it is not in all, and inspection does not read it.
	calls string
	held  string // owner -> when its hold began (held_record.lua)
}

// newSemKeys returns the keys of the semaphore name, and settings (the
// scripts' argument, AppendSemSettings) as a string made with them.
func newSemKeys(prefix, name string, settings []byte) (semKeys, string) {
	var k [8]string
	tail := keyFamily(k[:], settings, prefix, name, ":sem", "", ":n", ":limit", ":fence", ":q", ":w", ":calls", ":held")
	return semKeys{
		holders: k[0],
		counts:  k[1],
		limit:   k[2],
		fence:   k[3],
		queue:   k[4],
		waiters: k[5],
		all:     [6]string(k[:6]),
		calls:   k[6],
		held:    k[7],
	}, tail
}

// channel is where grants and wake-ups are published: the holders key's
// name (channels and keys are separate namespaces), in the same slot.
func (k *semKeys) channel() string { return k.holders }

// Semaphore returns the semaphore called name with permits permits (between
// 1 and MaxPermits) unless SetPermits or AddPermits stored another limit.
// opts override the Client's defaults for it; WithTTL is the lifetime of
// held permits without renewal. It sends nothing and never fails: an invalid name,
// permits or option is reported as ErrInvalidArgument by the first call that
// would reach Redis. A semaphore's keys are apart from those of a Mutex of
// the same name.
func (c *Client) Semaphore(name string, permits int, opts ...Option) *Semaphore {
	s := &Semaphore{c: c, name: name, permits: permits}
	err := c.lockConfig(&s.cfg, "Semaphore", name, opts)
	if err == nil && (permits < 1 || permits > MaxPermits) {
		err = errs.Errorf("dlock: Semaphore(%q): %w", name, errs.InvalidArgf("%d permits: want between 1 and %d", permits, MaxPermits))
	}
	s.ms, s.err = queueTimings(&s.cfg), err
	var buf [100]byte // room for any settings, copied into the keys' string
	settings := protocol.AppendSemSettings(buf[:0], c.drv, permits, &s.ms)
	s.keys, s.settings = newSemKeys(s.cfg.keyPrefix, name, settings)
	return s
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// TryAcquire makes one attempt to take n permits, in one round trip. It
// returns an error matching ErrNotObtained when fewer than n are free or
// other acquirers are queued first (they are served first), and
// ErrInvalidArgument when n is below 1 (then nothing is sent), when n
// exceeds the limit in force (found by the server: such a request can never
// succeed), or for an invalid name, permits or option; ErrKeyConflict when a
// key holds something dlock did not write; ErrClosed after Client.Close. The
// caller must Release the returned Permits.
func (s *Semaphore) TryAcquire(ctx context.Context, n int) (*Permits, error) {
	return s.acquire(ctx, n, false)
}

// Acquire takes n permits, waiting in arrival order as long as ctx allows:
// it is served once every earlier waiter was and n permits are free. n must
// be between 1 and the limit in force; asking for more can never succeed,
// and Acquire says so at once with ErrInvalidArgument (also when a lower
// limit stored by SetPermits or AddPermits while it waited makes it
// impossible). When ctx
// ends first, the error matches both ErrNotObtained and ctx's error, and the
// waiter has left the queue. Failures to reach Redis are retried while ctx
// allows; other errors are returned at once: ErrInvalidArgument,
// ErrKeyConflict, ErrClosed. The caller must Release the returned Permits.
func (s *Semaphore) Acquire(ctx context.Context, n int) (*Permits, error) {
	ctx, cancel := s.cfg.boundWait(ctx)
	defer cancel()
	return s.acquire(ctx, n, true)
}

func (s *Semaphore) acquire(ctx context.Context, n int, wait bool) (*Permits, error) {
	if s.err != nil {
		return nil, s.err
	}
	if n < 1 || n > MaxPermits {
		return nil, errs.Errorf("dlock: Semaphore(%q): %w", s.name, errs.InvalidArgf("asked for %d permits: want between 1 and the limit", n))
	}
	// The acquisition, its Lease (makeLease) and the Permits that hold
	// them are made together: one allocation per Acquire rather than three.
	both := &struct {
		p Permits
		a semAcquisition
	}{a: semAcquisition{s: s, n: n}}
	a := &both.a
	var l *Lease
	var err error
	if wait && a.lines() {
		l, err = s.acquireInLine(ctx, a)
	} else {
		l, err = s.c.acquire(ctx, a, &s.cfg, wait)
	}
	if err != nil {
		var e *errs.NotObtainedError
		if errors.As(err, &e) {
			// The attempt's pttl is when the first holder's permits
			// would expire: a poll time, not "held for so long".
			e.HolderTTL = 0
		}
		return nil, err
	}
	p := &both.p
	p.l, p.a = l, a
	p.n.Store(int64(n))
	return p, nil
}

// SetPermits changes the semaphore's limit to n (between 1 and MaxPermits)
// for every process that uses it, at once: the limit is stored in Redis and
// overrides the permits given to Client.Semaphore. Raising it serves queued
// waiters right away. Lowering it revokes nothing: held permits stay valid
// until released, and new acquisitions wait until usage drops below the new
// limit; waiters asking for more than the new limit fail with
// ErrInvalidArgument. The stored limit lives as long as the semaphore is
// used: it expires after a week (or twice the TTL, if longer) in which
// nobody acquired, released or renewed its permits, and the permits given
// by callers apply again. It returns ErrInvalidArgument for n out of range
// (nothing is sent), ErrKeyConflict, ErrClosed, or the failure to reach
// Redis.
func (s *Semaphore) SetPermits(ctx context.Context, n int) error {
	if s.err != nil {
		return s.err
	}
	if n < 1 || n > MaxPermits {
		return errs.Errorf("dlock: SetPermits %q: %w", s.name, errs.InvalidArgf("%d permits: want between 1 and %d", n, MaxPermits))
	}
	_, err := s.changeLimit(ctx, "SetPermits", n, "")
	return err
}

// AddPermits changes the semaphore's limit by delta, up or down, for every
// process that uses it, and returns the new limit. It adds to the limit in
// force (the one SetPermits or AddPermits stored, or else the permits given
// to Client.Semaphore) in one step on the server, so concurrent additions
// all count, and stores the result as SetPermits does, with the same
// effects: raising the limit serves queued waiters right away; lowering it
// revokes nothing, and waiters asking for more than the new limit fail with
// ErrInvalidArgument. A delta of 0 stores the limit in force as it is. An
// addition counts once even when the Redis client sends it again after
// losing its reply (the semaphore remembers the calls of the last minute,
// which also bounds the call).
//
// A new limit below 1 or above MaxPermits is refused with an error matching
// ErrInvalidArgument, and nothing changes; only Redis knows the limit in
// force, so it is the server that refuses, except for a delta that no
// limit could take (beyond ±(MaxPermits−1)), refused before anything is
// sent. It also returns ErrKeyConflict, ErrClosed, or the failure to reach
// Redis (the limit may then have changed or not: a retry with the same
// WithIdempotencyKey adds once). It is safe for concurrent use.
func (s *Semaphore) AddPermits(ctx context.Context, delta int) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if delta < 1-MaxPermits || delta > MaxPermits-1 {
		return 0, errs.Errorf("dlock: AddPermits %q: %w", s.name, errs.InvalidArgf("adding %d permits: no limit between 1 and %d can take that", delta, MaxPermits))
	}
	id, err := changeID(ctx, 'a', "AddPermits", s.name)
	if err != nil {
		return 0, err
	}
	return s.changeLimit(ctx, "AddPermits", delta, id)
}

// semCallMemory is how long a semaphore remembers an AddPermits call, for
// the reasons latchCallMemory gives: a call sent again within it has no
// second effect, and each call is bounded by it.
const semCallMemory = latchCallMemory

// changeLimit runs sem_set_permits for op: it sets the limit to v, or with
// a call id, adds v to the limit in force. It returns the new limit.
func (s *Semaphore) changeLimit(ctx context.Context, op string, v int, id string) (int, error) {
	if err := s.c.checkOpen(op, s.name); err != nil {
		return 0, err
	}
	ch := protocol.SemLimitChange{V: v, ID: id, Calls: s.keys.calls, Memory: semCallMemory, Permits: s.permits, Max: MaxPermits}
	if id != "" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, semCallMemory)
		defer cancel()
	}
	limit, err := protocol.SemSetPermits(ctx, s.c.drv, s.keys.all[:], s.keys.channel(), &s.ms, ch, s.deliver)
	var lerr *protocol.LimitError
	if errors.As(err, &lerr) {
		return 0, errs.Errorf("dlock: %s %q: %w", op, s.name,
			errs.InvalidArgf("the limit is %d, and adding %d would make it %d: want between 1 and %d", lerr.Limit, v, lerr.Limit+int64(v), MaxPermits))
	}
	if err != nil {
		return 0, errs.Redis(op, s.name, err)
	}
	return int(limit), nil
}

// Available returns how many permits are free now: the limit in force minus
// the permits held, or 0 when a lowered limit is still exceeded. Queued
// waiters may take free permits at any moment, so the answer is a snapshot.
// It changes nothing. It returns ErrInvalidArgument for an invalid
// semaphore, ErrKeyConflict, ErrClosed, or the failure to reach Redis.
func (s *Semaphore) Available(ctx context.Context) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if err := s.c.checkOpen("Available", s.name); err != nil {
		return 0, err
	}
	limit, used, err := protocol.SemAvailable(ctx, s.c.drv, s.keys.all[:3], s.permits)
	if err != nil {
		return 0, errs.Redis("Available", s.name, err)
	}
	if free := limit - used; free > 0 {
		return int(free), nil
	}
	return 0, nil
}

// semLimitRetention is how long a limit stored by SetPermits outlives the
// last use of its semaphore. It is configuration, so it should survive
// quiet nights and weekends; but dlock leaves no key without an expiry, and
// a semaphore unused for a week has probably had its code (and permits)
// changed since.
func semLimitRetention(ttl time.Duration) time.Duration {
	if r := 2 * ttl; r > 7*24*time.Hour {
		return r
	}
	return 7 * 24 * time.Hour
}

// deliver tells this Client's waiter owner of its grant, ahead of the
// pub/sub message.
func (s *Semaphore) deliver(owner string, fence int64, px time.Duration) {
	s.c.notify.Deliver(s.keys.channel(), owner, fence, px)
}
