package dlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/scripts"
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
type Semaphore struct {
	c       *Client
	name    string
	permits int
	cfg     config
	ms      semMillis
	keys    semKeys
	err     error // invalid name, permits or option, reported on first use
}

// semMillis are a Semaphore's timings in the milliseconds its scripts take,
// computed with the descriptor: its script calls pass them by pointer,
// which boxes nothing (an int64 in an interface is an allocation).
type semMillis struct {
	limitRetention, ttl, waiterLease, claimWindow, fenceRetention int64
}

func newSemMillis(cfg *config) semMillis {
	return semMillis{
		limitRetention: semLimitRetention(cfg.ttl).Milliseconds(),
		ttl:            cfg.initialPX().Milliseconds(),
		waiterLease:    cfg.waiterLease.Milliseconds(),
		claimWindow:    cfg.claimWindow().Milliseconds(),
		fenceRetention: fenceRetention(cfg.ttl).Milliseconds(),
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
	all     []string
	// calls remembers AddPermits's recent call ids. Only AddPermits touches
	// it, so it is not in all, and inspection does not read it.
	calls string
}

func newSemKeys(prefix, name string) semKeys {
	keys := keyFamily(prefix, name, ":sem", "", ":n", ":limit", ":fence", ":q", ":w", ":calls")
	return semKeys{
		holders: keys[0],
		counts:  keys[1],
		limit:   keys[2],
		fence:   keys[3],
		queue:   keys[4],
		waiters: keys[5],
		all:     keys[:6:6], // calls is not among them (an append copies)
		calls:   keys[6],
	}
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
	cfg, err := c.lockConfig("Semaphore", name, opts)
	if err == nil && (permits < 1 || permits > MaxPermits) {
		err = errs.Errorf("dlock: Semaphore(%q): %w", name, errs.InvalidArgf("%d permits: want between 1 and %d", permits, MaxPermits))
	}
	return &Semaphore{c: c, name: name, permits: permits, cfg: cfg, ms: newSemMillis(&cfg), keys: newSemKeys(cfg.keyPrefix, name), err: err}
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
	return s.acquire(ctx, n, true)
}

func (s *Semaphore) acquire(ctx context.Context, n int, wait bool) (*Permits, error) {
	if s.err != nil {
		return nil, s.err
	}
	if n < 1 || n > MaxPermits {
		return nil, errs.Errorf("dlock: Semaphore(%q): %w", s.name, errs.InvalidArgf("asked for %d permits: want between 1 and the limit", n))
	}
	a := &semAcquisition{s: s, n: n}
	l, err := s.c.acquire(ctx, a, &s.cfg, wait)
	if err != nil {
		var e *errs.NotObtainedError
		if errors.As(err, &e) {
			// The attempt's pttl is when the first holder's permits
			// would expire: a poll time, not "held for so long".
			e.HolderTTL = 0
		}
		return nil, err
	}
	p := &Permits{l: l, a: a}
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
	call := &driver.Call{
		Script: scripts.SemSetPermits,
		Keys:   s.keys.all,
		Args: []any{
			v, &s.ms.limitRetention, &s.ms.fenceRetention,
			s.c.drv.PublishCommand(), s.keys.channel(),
		},
	}
	if id != "" {
		call.Keys = append(s.keys.all[:len(s.keys.all):len(s.keys.all)], s.keys.calls)
		call.Args = append(call.Args, s.permits, MaxPermits, id, semCallMemory.Milliseconds())
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, semCallMemory)
		defer cancel()
	}
	s.c.drv.Run(ctx, call)
	return s.setPermitsResult(op, v, call)
}

// setPermitsResult reads sem_set_permits's reply to op, which added v to
// the limit or set it to v: the new limit, after telling this Client's
// waiters of their grants.
func (s *Semaphore) setPermitsResult(op string, v int, call *driver.Call) (int, error) {
	if limit, ok := replyErrorNumber(call.Err, "DLOCK_RANGE "); ok {
		return 0, errs.Errorf("dlock: %s %q: %w", op, s.name,
			errs.InvalidArgf("the limit is %d, and adding %d would make it %d: want between 1 and %d", limit, v, limit+int64(v), MaxPermits))
	}
	limit, err := s.grantsResult(call)
	if err != nil {
		return 0, errs.Redis(op, s.name, err)
	}
	return int(limit), nil
}

// replyErrorNumber reads the number after marker in a script's error reply
// (DLOCK_LIMIT, DLOCK_RANGE): ok when err is such a reply; the number is -1
// when it is missing.
func replyErrorNumber(err error, marker string) (n int64, ok bool) {
	var rerr *driver.ReplyError
	if !errors.As(err, &rerr) {
		return 0, false
	}
	i := strings.Index(rerr.Msg, marker)
	if i < 0 {
		return 0, false
	}
	n = -1
	if f := strings.Fields(rerr.Msg[i+len(marker):]); len(f) > 0 {
		if v, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			n = v
		}
	}
	return n, true
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
	call := &driver.Call{Script: scripts.SemAvailable, Keys: s.keys.all[:3], Args: []any{s.permits}}
	s.c.drv.Run(ctx, call)
	if call.Err != nil {
		return 0, errs.Redis("Available", s.name, call.Err)
	}
	v, err := replyInts(call.Reply, 2)
	if err != nil {
		return 0, errs.Redis("Available", s.name, err)
	}
	if free := v[0] - v[1]; free > 0 {
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

// grantsResult reads a reply of the form {head, fence, px, owner, ...} (the
// release and SetPermits scripts): it tells each waiter of this Client that
// was granted permits directly, ahead of the pub/sub message, and returns
// head.
func (s *Semaphore) grantsResult(call *driver.Call) (int64, error) {
	if call.Err != nil {
		return 0, call.Err
	}
	items, ok := call.Reply.([]any)
	if !ok || len(items) == 0 || (len(items)-1)%3 != 0 {
		return 0, errs.Unexpected(call.Reply)
	}
	head, ok := items[0].(int64)
	if !ok {
		return 0, errs.Unexpected(call.Reply)
	}
	for i := 1; i < len(items); i += 3 {
		v, err := replyInts(items[i:i+2], 2)
		owner, ok := items[i+2].(string)
		if err != nil || !ok {
			return 0, errs.Unexpected(call.Reply)
		}
		s.c.notify.Deliver(s.keys.channel(), owner, v[0], ms(v[1]))
	}
	return head, nil
}
