//go:build linux

package dlock_test

// The fault-injection suite's machinery: workers that take locks and record
// what they believed (in this process, or in child processes that re-run
// this test binary), go-redis hooks that record script calls, a prober of
// keys, mutants, and assertions over the recorded history. The scenarios
// are in chaos_*_test.go; the history types and checkers in internal/chaos;
// what is measured and why in docs/reliability.md.
//
// Two tiers: by default (make test) every scenario runs a few trials with
// generous timing bounds; DLOCK_CHAOS=long (make chaos) runs the trial
// counts of docs/reliability.md and publishes the figures.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/chaos"
	"github.com/dlock-go/dlock/internal/scripts"
)

// chaosSpec tells a worker what to do. It travels to child workers as JSON
// in chaosSpecEnv.
type chaosSpec struct {
	Proc string `json:"proc"` // names the worker in events
	// Kind is what a section does: take a "mutex" (default), a "fair"
	// mutex, a "reentrant" mutex (then lock it again once or twice, see
	// reenter), an "rwmutex" (for reading or writing, see Reads), a
	// "redlock" or one permit of a "semaphore"; or, on the latch named by
	// Locks[0], "latch-wait" (Wait) or "latch-countdown" (CountDown after a
	// random delay of up to Hold).
	Kind  string   `json:"kind,omitempty"`
	Addrs []string `json:"addrs"` // the lock's Redis: one address, or every Redlock node
	// StoreAddr is the server of the counters and the fenced store; empty
	// means Addrs[0].
	StoreAddr string        `json:"store,omitempty"`
	Locks     []string      `json:"locks"` // each section picks one at random
	TTL       time.Duration `json:"ttl"`
	NoRenew   bool          `json:"norenew,omitempty"`
	// WaiterLease is the lock client's WithWaiterLease (0: default).
	WaiterLease time.Duration `json:"waiterlease,omitempty"`
	// Permits is a semaphore's limit; each section takes one permit.
	Permits int `json:"permits,omitempty"`
	// Reads is the percentage of an rwmutex's sections that read (RLock);
	// the others write (Lock). Only writers touch the counters.
	Reads int `json:"reads,omitempty"`
	// Sections is how many critical sections each goroutine runs.
	Sections   int `json:"sections"`
	Goroutines int `json:"goroutines,omitempty"` // default 1
	// Hold is how long a section lasts; within it the worker records Held
	// (and, with Fenced, writes the fenced store) every Beat.
	Hold time.Duration `json:"hold,omitempty"`
	Beat time.Duration `json:"beat,omitempty"`
	// StopOnLoss ends a section as soon as the lease's Done closes.
	StopOnLoss bool `json:"stoponloss,omitempty"`
	// Counter increments an unfenced counter per lock once per section
	// (GET then SET): lost updates show mutual exclusion failing.
	Counter bool `json:"counter,omitempty"`
	// Fenced increments a fenced counter per lock (fence.Store.Update) at
	// every beat.
	Fenced bool `json:"fenced,omitempty"`
	// Try polls with TryLock every Spin instead of waiting in Lock.
	Try  bool          `json:"try,omitempty"`
	Spin time.Duration `json:"spin,omitempty"`
	// LockTimeout bounds each acquisition; default 30s.
	LockTimeout time.Duration `json:"locktimeout,omitempty"`
	// Hooks records every script call of the lock's client (Cmd events).
	Hooks bool `json:"hooks,omitempty"`
	// ReadTimeout is the lock clients' go-redis read timeout (0: default).
	ReadTimeout time.Duration `json:"readtimeout,omitempty"`
	// Warm takes and releases another lock first (see warm).
	Warm bool `json:"warm,omitempty"`
	// HoldRand draws each section's hold uniformly from [Hold/2, Hold].
	HoldRand bool `json:"holdrand,omitempty"`
	// Mutant names the broken variant a child worker installs (see
	// chaosMutants); in-process workers run whatever the test installed.
	Mutant string `json:"mutant,omitempty"`
	Seed   int64  `json:"seed"`

	// In-process only: a section also ends when until is closed.
	until <-chan struct{}
	// In-process only: called with each granted lease, before its section.
	onLease func(*dlock.Lease)
	// In-process only: called after a lease's loss was recorded.
	onLost func()
}

// chaosCounterKey is the key of lock name's unfenced counter, and
// chaosFencedKey that of its fenced one. They are outside dlock's prefix.
func chaosCounterKey(name string) string { return "chaos:{" + name + "}:counter" }
func chaosFencedKey(name string) string  { return "chaos:{" + name + "}:fenced" }

// runChaosWorker runs spec's sections on every goroutine, recording into
// rec, and returns when all are done (or ctx ends). The Client and its
// connections are closed before it returns.
func runChaosWorker(ctx context.Context, spec chaosSpec, rec *chaos.Recorder) error {
	w, err := newChaosWorker(spec, rec)
	if err != nil {
		return err
	}
	defer w.close()
	if spec.Warm {
		if err := w.warm(ctx); err != nil {
			return err
		}
	}
	w.run(ctx)
	return nil
}

// run runs the sections.
func (w *chaosWorker) run(ctx context.Context) {
	spec := w.spec
	n := max(spec.Goroutines, 1)
	r := rand.New(rand.NewSource(spec.Seed))
	var wg sync.WaitGroup
	for g := 0; g < n; g++ {
		gr, _ := chaos.Fork(r)
		wg.Add(1)
		go func(g int, r *rand.Rand) {
			defer wg.Done()
			for i := 0; i < spec.Sections && ctx.Err() == nil; i++ {
				w.section(ctx, g, i, r)
			}
		}(g, gr)
	}
	wg.Wait()
}

// warm opens a connection to every lock server and loads the acquire and
// release scripts, by taking and releasing a lock nobody else uses, so that
// the first section's timing is not the connection's or the script cache's.
func (w *chaosWorker) warm(ctx context.Context) error {
	lease, err := w.locker(w.spec.Proc+":warm-up", "").TryLock(dlock.WithOwner(ctx, w.spec.Proc))
	if err != nil {
		return fmt.Errorf("warming up: %w", err)
	}
	return lease.Unlock(ctx)
}

type chaosWorker struct {
	spec     chaosSpec
	rec      *chaos.Recorder
	lockRDBs []*redis.Client
	store    *redis.Client
	fenced   *fence.Store
	client   *dlock.Client
	redlock  *dlock.Redlock
	watchers sync.WaitGroup
}

func newChaosWorker(spec chaosSpec, rec *chaos.Recorder) (*chaosWorker, error) {
	switch spec.Kind {
	case "", "mutex", "fair", "reentrant", "rwmutex", "redlock", "semaphore", "latch-wait", "latch-countdown":
	default: // never a Mutex by mistake
		return nil, fmt.Errorf("worker %s: unknown kind %q", spec.Proc, spec.Kind)
	}
	w := &chaosWorker{spec: spec, rec: rec}
	opts := []dlock.Option{dlock.WithOwnerInfo(spec.Proc), dlock.WithAutoRenew(!spec.NoRenew)}
	if spec.TTL > 0 {
		opts = append(opts, dlock.WithTTL(spec.TTL))
	}
	if spec.WaiterLease > 0 {
		opts = append(opts, dlock.WithWaiterLease(spec.WaiterLease))
	}
	for _, addr := range spec.Addrs {
		o := &redis.Options{Addr: addr, ReadTimeout: spec.ReadTimeout}
		if spec.Kind == "redlock" {
			o.ContextTimeoutEnabled = true
		}
		rdb := redis.NewClient(o)
		if spec.Hooks {
			rdb.AddHook(newCmdHook(rec, spec.Proc))
		}
		if ignoreReplicaAcks.Load() {
			rdb.AddHook(ackLiar{})
		}
		w.lockRDBs = append(w.lockRDBs, rdb)
	}
	var err error
	if spec.Kind == "redlock" {
		nodes := make([]dlock.RedisClient, len(w.lockRDBs))
		for i, rdb := range w.lockRDBs {
			nodes[i] = rdb
		}
		w.redlock, err = dlock.NewRedlock(nodes, opts...)
	} else {
		w.client, err = dlock.New(w.lockRDBs[0], opts...)
	}
	if err != nil {
		w.close()
		return nil, err
	}
	storeAddr := spec.StoreAddr
	if storeAddr == "" {
		storeAddr = spec.Addrs[0]
	}
	w.store = redis.NewClient(&redis.Options{Addr: storeAddr})
	w.fenced, err = fence.New(w.store)
	if err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

func (w *chaosWorker) close() {
	if w.client != nil {
		_ = w.client.Close()
	}
	if w.redlock != nil {
		_ = w.redlock.Close()
	}
	w.watchers.Wait() // Close ended every lease still held
	for _, rdb := range w.lockRDBs {
		_ = rdb.Close()
	}
	if w.store != nil {
		_ = w.store.Close()
	}
}

// locker returns the lock called name of the spec's kind; of an rwmutex,
// the half of mode (a chaos.Mode...). A reentrant mutex's owner is the one
// the context of each call carries.
func (w *chaosWorker) locker(name, mode string) dlock.Locker {
	switch w.spec.Kind {
	case "redlock":
		return w.redlock.Mutex(name)
	case "fair":
		return w.client.FairMutex(name)
	case "reentrant":
		return w.client.ReentrantMutex(name)
	case "rwmutex":
		if mode == chaos.ModeRead {
			return readLocker{w.client.RWMutex(name)}
		}
		return w.client.RWMutex(name)
	}
	return w.client.Mutex(name)
}

// readLocker is an RWMutex's read half as a Locker.
type readLocker struct{ *dlock.RWMutex }

func (r readLocker) TryLock(ctx context.Context) (*dlock.Lease, error) { return r.TryRLock(ctx) }
func (r readLocker) Lock(ctx context.Context) (*dlock.Lease, error)    { return r.RLock(ctx) }

// lockTimeout bounds each wait: LockTimeout, by default 30s.
func (w *chaosWorker) lockTimeout() time.Duration {
	if w.spec.LockTimeout == 0 {
		return 30 * time.Second
	}
	return w.spec.LockTimeout
}

// acquire takes name (of an rwmutex, in mode), by Lock or by polling
// TryLock, and records it. It returns the lease and how to release it
// (Unlock, or a semaphore's Release), or nil.
func (w *chaosWorker) acquire(ctx context.Context, name, hold, mode string) (*dlock.Lease, func(context.Context) error) {
	lctx, cancel := context.WithTimeout(ctx, w.lockTimeout())
	defer cancel()
	take := func() (*dlock.Lease, func(context.Context) error, error) {
		var lease *dlock.Lease
		var err error
		switch {
		case w.spec.Kind == "semaphore":
			var p *dlock.Permits
			sem := w.client.Semaphore(name, w.spec.Permits)
			if w.spec.Try {
				p, err = sem.TryAcquire(lctx, 1)
			} else {
				p, err = sem.Acquire(lctx, 1)
			}
			if err != nil {
				return nil, nil, err
			}
			return dlock.PermitsLease(p), p.Release, nil
		case w.spec.Try:
			lease, err = w.locker(name, mode).TryLock(lctx)
		default:
			lease, err = w.locker(name, mode).Lock(lctx)
		}
		if err != nil {
			return nil, nil, err
		}
		return lease, lease.Unlock, nil
	}
	var (
		lease   *dlock.Lease
		release func(context.Context) error
		err     error
		t0      int64
	)
	for {
		t0 = chaos.Now()
		lease, release, err = take()
		if !w.spec.Try || !errors.Is(err, dlock.ErrNotObtained) || lctx.Err() != nil {
			break
		}
		select {
		case <-time.After(w.spec.Spin):
		case <-lctx.Done():
		}
	}
	e := chaos.Event{Kind: chaos.Acquire, T0: t0, T: chaos.Now(), Proc: w.spec.Proc, Lock: name, Hold: hold, Note: mode}
	if err != nil {
		e.Err = errClass(err)
		w.rec.Add(e)
		return nil, nil
	}
	e.OK, e.Token, e.Owner = true, lease.Token(), dlock.LeaseOwner(lease)
	w.rec.Add(e)
	w.watch(lease, name, hold)
	return lease, release
}

// watch records the lease's loss (not its end by Unlock) when Done closes.
func (w *chaosWorker) watch(lease *dlock.Lease, name, hold string) {
	w.watchers.Add(1)
	go func() {
		defer w.watchers.Done()
		<-lease.Done()
		t := chaos.Now()
		err := lease.Err()
		if !errors.Is(err, dlock.ErrLockLost) {
			return // ended by Unlock
		}
		deadline := chaos.Now() + int64(time.Until(dlock.LeaseValidUntil(lease)))
		w.rec.Add(chaos.Event{Kind: chaos.Lost, T: t, Proc: w.spec.Proc, Lock: name, Hold: hold, Deadline: deadline, Err: errClass(err)})
		if w.spec.onLost != nil {
			w.spec.onLost()
		}
	}()
}

// section is one critical section: acquire (in a mode drawn for an
// rwmutex; as an owner of its own for a reentrant mutex), increment the
// counters unless it reads, hold (recording beliefs, writing the fenced
// store; nesting holds of a reentrant mutex), release.
func (w *chaosWorker) section(ctx context.Context, g, i int, r *rand.Rand) {
	name := w.spec.Locks[r.Intn(len(w.spec.Locks))]
	hold := fmt.Sprintf("%s/%d/%d", w.spec.Proc, g, i)
	switch w.spec.Kind {
	case "latch-wait":
		w.latchWait(ctx, name, hold)
		return
	case "latch-countdown":
		w.sleep(ctx, time.Duration(r.Int63n(int64(w.spec.Hold)+1)))
		t0 := chaos.Now()
		err := w.client.Latch(name).CountDown(ctx)
		w.rec.Add(outcome(chaos.Event{Kind: chaos.CountDown, T0: t0, Proc: w.spec.Proc, Lock: name, Hold: hold}, err))
		return
	case "reentrant":
		// A new owner per section: sections exclude each other, in this
		// process too, and nest only their own holds.
		ctx = dlock.WithOwner(ctx, dlock.NewOwnerID())
	}
	mode := ""
	if w.spec.Kind == "rwmutex" {
		mode = chaos.ModeWrite
		if r.Intn(100) < w.spec.Reads {
			mode = chaos.ModeRead
		}
	}
	lease, release := w.acquire(ctx, name, hold, mode)
	if lease == nil {
		return
	}
	if w.spec.onLease != nil {
		w.spec.onLease(lease)
	}
	writes := mode != chaos.ModeRead
	if w.spec.Counter && writes {
		w.increment(ctx, name, hold)
	}
	holdFor := w.spec.Hold
	if w.spec.HoldRand && holdFor > 0 {
		holdFor = holdFor/2 + time.Duration(r.Int63n(int64(holdFor/2)+1))
	}
	if w.spec.Kind == "reentrant" {
		w.reenter(ctx, lease, name, hold, 1+r.Intn(2), holdFor)
	}
	w.hold(ctx, lease, name, hold, holdFor, writes)
	t0 := chaos.Now()
	err := release(context.WithoutCancel(ctx))
	w.rec.Add(outcome(chaos.Event{Kind: chaos.Release, T0: t0, Proc: w.spec.Proc, Lock: name, Hold: hold}, err))
}

// hold holds lease for d: it records Held every Beat while Done is open
// and, if it writes and the spec says Fenced, increments the fenced
// counter at each beat.
func (w *chaosWorker) hold(ctx context.Context, lease *dlock.Lease, name, hold string, d time.Duration, writes bool) {
	end := time.Now().Add(d)
	for {
		s := chaos.Now() // before looking: the belief held at or after s
		lost := false
		select {
		case <-lease.Done():
			lost = true
		default:
			w.rec.Add(chaos.Event{Kind: chaos.Held, T: s, Proc: w.spec.Proc, Hold: hold})
		}
		if lost && w.spec.StopOnLoss {
			return
		}
		if w.spec.Fenced && writes && lease.Token() != 0 {
			w.fencedIncrement(ctx, name, hold, lease.Token())
		}
		left := time.Until(end)
		if left <= 0 || w.spec.Beat <= 0 || !w.sleep(ctx, min(left, w.spec.Beat)) {
			return
		}
	}
}

// reenter locks the reentrant mutex name again, depth times over, for the
// owner ctx carries, which holds it as hold, and unlocks the nested leases
// in reverse order, recording each nested Lock and Unlock (Reenter events).
// Each nested lease is held for d once the leases nested in it are
// unlocked, and the section holds its own lease after reenter returns: a
// nested Unlock that let the lock go shows as an overlap. outer is the
// lease the nesting starts from: once its grant has ended (a process
// starved past the TTL), a nested Lock takes a grant of its own, which is
// not a nested hold of outer's and is given back at once.
func (w *chaosWorker) reenter(ctx context.Context, outer *dlock.Lease, name, hold string, depth int, d time.Duration) {
	if outer.Err() != nil {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, w.lockTimeout())
	t0 := chaos.Now()
	lease, err := w.client.ReentrantMutex(name).Lock(lctx)
	cancel()
	e := outcome(chaos.Event{Kind: chaos.Reenter, T0: t0, Proc: w.spec.Proc, Lock: name, Hold: hold, Note: "lock"}, err)
	if err == nil && lease.Token() != outer.Token() && outer.Err() != nil {
		_ = lease.Unlock(context.WithoutCancel(ctx))
		return
	}
	if err != nil {
		w.rec.Add(e)
		return
	}
	e.Token = lease.Token()
	w.rec.Add(e)
	if depth > 1 {
		w.reenter(ctx, outer, name, hold, depth-1, d)
	}
	w.hold(ctx, lease, name, hold, d, true)
	t0 = chaos.Now()
	err = lease.Unlock(context.WithoutCancel(ctx))
	w.rec.Add(outcome(chaos.Event{Kind: chaos.Reenter, T0: t0, Proc: w.spec.Proc, Lock: name, Hold: hold, Note: "unlock"}, err))
}

// outcome completes e, an operation invoked at e.T0 that returned err now:
// it stamps T and sets OK or Err.
func outcome(e chaos.Event, err error) chaos.Event {
	e.T, e.OK = chaos.Now(), err == nil
	if err != nil {
		e.Err = errClass(err)
	}
	return e
}

// latchWait waits for the latch name to reach zero and records it.
func (w *chaosWorker) latchWait(ctx context.Context, name, hold string) {
	wctx, cancel := context.WithTimeout(ctx, w.lockTimeout())
	defer cancel()
	t0 := chaos.Now()
	w.rec.Add(chaos.Event{Kind: chaos.Await, T: t0, Proc: w.spec.Proc, Lock: name, Hold: hold, Note: "invoked"})
	err := w.client.Latch(name).Wait(wctx)
	w.rec.Add(outcome(chaos.Event{Kind: chaos.Await, T0: t0, Proc: w.spec.Proc, Lock: name, Hold: hold, Note: "returned"}, err))
}

// sleep waits d; false if the section must end first.
func (w *chaosWorker) sleep(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-w.spec.until:
	case <-ctx.Done():
	}
	return false
}

// increment is an unfenced read-modify-write that only mutual exclusion
// keeps from losing updates.
func (w *chaosWorker) increment(ctx context.Context, name, hold string) {
	key := chaosCounterKey(name)
	e := chaos.Event{Kind: chaos.RMW, T0: chaos.Now(), Proc: w.spec.Proc, Lock: name, Hold: hold, Key: key}
	v, err := w.store.Get(ctx, key).Int64()
	if errors.Is(err, redis.Nil) {
		v, err = 0, nil
	}
	if err == nil {
		err = w.store.Set(ctx, key, v+1, 0).Err()
	}
	e.T, e.Val, e.OK = chaos.Now(), v, err == nil
	if err != nil {
		e.Err = errClass(err)
	}
	w.rec.Add(e)
}

// fencedIncrement increments the lock's fenced counter with token.
func (w *chaosWorker) fencedIncrement(ctx context.Context, name, hold string, token int64) {
	key := chaosFencedKey(name)
	e := chaos.Event{Kind: chaos.Write, T0: chaos.Now(), Proc: w.spec.Proc, Lock: name, Hold: hold, Key: key, Token: token, Note: "update"}
	_, err := w.fenced.Update(ctx, key, token, func(old string, ok bool) (string, error) {
		n, _ := strconv.ParseInt(old, 10, 64)
		return strconv.FormatInt(n+1, 10), nil
	})
	e.T, e.OK = chaos.Now(), err == nil
	if err != nil {
		e.Err = errClass(err)
	}
	w.rec.Add(e)
}

// errClass turns an error into an Event's Err: its class, then the message.
func errClass(err error) string {
	class := chaos.ErrOther
	switch {
	case errors.Is(err, fence.ErrStaleToken):
		class = chaos.ErrStale
	case errors.Is(err, dlock.ErrNotHeld):
		class = chaos.ErrNotHeld
	case errors.Is(err, dlock.ErrLockLost):
		class = chaos.ErrLost
	case errors.Is(err, dlock.ErrQuorum):
		class = chaos.ErrQuorum
	case errors.Is(err, dlock.ErrNotObtained):
		class = chaos.ErrNotObtained
	case errors.Is(err, dlock.ErrKeyConflict):
		class = chaos.ErrConflict
	case errors.Is(err, dlock.ErrInvalidArgument):
		class = chaos.ErrInvalid
	}
	return class + ": " + err.Error()
}

// cmdHook is a go-redis hook that records the lock scripts a client sends
// (Cmd events): renewals, releases and acquisitions, with their owner.
type cmdHook struct {
	rec  *chaos.Recorder
	proc string
	ops  map[string]string // script SHA1 or source -> "renew", "release", "release-hold", "acquire"
}

func newCmdHook(rec *chaos.Recorder, proc string) *cmdHook {
	h := &cmdHook{rec: rec, proc: proc, ops: map[string]string{}}
	for op, ss := range map[string][]*driver.Script{
		"renew":   {scripts.OwnedExtend, scripts.RWExtend},
		"release": {scripts.MutexRelease, scripts.MutexTransfer, scripts.OwnedRelease, scripts.RWRelease},
		// A reentrant lock's hold: a "release" when it was the owner's last.
		"release-hold": {scripts.ReentrantRelease},
		"acquire":      {scripts.MutexAcquire, scripts.RedlockAcquire},
	} {
		for _, s := range ss {
			h.ops[s.Hash()] = op
			h.ops[s.Source()] = op
		}
	}
	return h
}

func (h *cmdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cmdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		op, owner := h.classify(cmd)
		if op == "" {
			return next(ctx, cmd)
		}
		t0 := chaos.Now()
		err := next(ctx, cmd)
		h.record(op, owner, t0, cmd)
		return err
	}
}

func (h *cmdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		t0 := chaos.Now()
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if op, owner := h.classify(cmd); op != "" {
				h.record(op, owner, t0, cmd)
			}
		}
		return err
	}
}

// classify names a script call and finds its owner, ARGV[1] of every
// script it records, less the hold id (32 hex digits) that starts it for a
// reentrant lock (a hold's release names the hold, a renewal the grant's
// hold): the suite knows a reentrant holder by its owner value
// (chaosOwner).
func (h *cmdHook) classify(cmd redis.Cmder) (op, owner string) {
	args := cmd.Args()
	if len(args) < 3 {
		return "", ""
	}
	if name := argString(args[0]); !strings.EqualFold(name, "evalsha") && !strings.EqualFold(name, "eval") {
		return "", ""
	}
	op = h.ops[argString(args[1])]
	numKeys, err := strconv.Atoi(argString(args[2]))
	if op == "" || err != nil || len(args) <= 3+numKeys {
		return "", ""
	}
	owner = argString(args[3+numKeys])
	if op == "release-hold" {
		owner = chaosOwner(reentrantKeySuffix, owner)
	} else {
		owner = chaosOwner(argString(args[3]), owner)
	}
	return op, owner
}

// reentrantKeySuffix ends the key of a reentrant lock.
const reentrantKeySuffix = ":re"

// chaosOwner is the owner the suite records for value, found in key (or a
// script's ARGV[1] on key): a reentrant lock's key, and its holds, start
// with a hold id, which it leaves out, so that every hold and grant of one
// owner reads as that owner (dlock.LeaseOwner).
func chaosOwner(key, value string) string {
	if strings.HasSuffix(key, reentrantKeySuffix) && len(value) > 32 {
		return value[32:]
	}
	return value
}

// argString reads a command argument as go-redis writes it: drivers pass
// strings, pointers to strings (to save allocations), and integers.
func argString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case *string:
		return *v
	case []byte:
		return string(v)
	case *int64:
		return strconv.FormatInt(*v, 10)
	}
	return fmt.Sprint(v)
}

func (h *cmdHook) record(op, owner string, t0 int64, cmd redis.Cmder) {
	e := chaos.Event{Kind: chaos.Cmd, T0: t0, T: chaos.Now(), Proc: h.proc, Owner: owner, Note: op}
	if c, ok := cmd.(*redis.Cmd); ok && c.Err() == nil {
		switch v := c.Val().(type) {
		case int64: // releases and renewals answer 1; the acquire fast path, the fence
			e.OK = v == 1 || (op == "acquire" && v > 0)
			if op == "release-hold" && e.OK {
				e.Note = "release" // the release fast path: the last hold, nobody waiting
			}
		case []any:
			code, _ := v[0].(int64)
			e.OK = code == 1 || code == 2
			if op == "release-hold" && e.OK {
				e.Note = "release" // the last hold: the lock is released or handed over
			}
		}
	} else if cmd.Err() != nil {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			return // the driver sends EVAL next; that one is recorded
		}
		e.Err = cmd.Err().Error()
	}
	h.rec.Add(e)
}

// probe records every key matching pattern (its value when it is a string,
// and its PTTL) every interval until ctx ends.
func probe(ctx context.Context, rdb *redis.Client, rec *chaos.Recorder, pattern string, every time.Duration) {
	for ctx.Err() == nil {
		keys, err := rdb.Keys(ctx, pattern).Result()
		if err == nil {
			for _, k := range keys {
				probeKey(ctx, rdb, rec, k)
			}
		}
		select {
		case <-time.After(every):
		case <-ctx.Done():
		}
	}
}

// probeKey records one key's value and PTTL.
func probeKey(ctx context.Context, rdb *redis.Client, rec *chaos.Recorder, key string) {
	t0 := chaos.Now()
	pipe := rdb.Pipeline()
	typ := pipe.Type(ctx, key)
	pttl := pipe.Do(ctx, "PTTL", key) // raw: go-redis turns -1 and -2 into durations
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return
	}
	ms, err := pttl.Int64()
	if err != nil {
		return
	}
	e := chaos.Event{Kind: chaos.Probe, T0: t0, Key: key, Val: ms}
	if typ.Val() == "string" {
		v, _ := rdb.Get(ctx, key).Result()
		e.Owner = chaosOwner(key, v)
	}
	e.T = chaos.Now()
	rec.Add(e)
}

// redisClientNoRetry returns a client that fails fast while its server is
// down, for probes; it is closed at the end of the test.
func redisClientNoRetry(t testing.TB, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// probeAll records every key matching pattern once.
func probeAll(t testing.TB, rdb *redis.Client, rec *chaos.Recorder, pattern string) {
	ctx := testCtx(t)
	keys, err := rdb.Keys(ctx, pattern).Result()
	if err != nil {
		t.Fatalf("KEYS %s: %v", pattern, err)
	}
	for _, k := range keys {
		probeKey(ctx, rdb, rec, k)
	}
}

// recordFinal records the final value of lock name's unfenced counter.
func recordFinal(t testing.TB, rdb *redis.Client, rec *chaos.Recorder, name string) {
	key := chaosCounterKey(name)
	v, err := rdb.Get(testCtx(t), key).Int64()
	if errors.Is(err, redis.Nil) {
		v, err = 0, nil
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	rec.Add(chaos.Event{Kind: chaos.Final, Key: key, Val: v})
}

// expectNone fails t with the violations found, if any.
func expectNone(t testing.TB, what string, vs []chaos.Violation) {
	t.Helper()
	if len(vs) == 0 {
		return
	}
	var b strings.Builder
	for i, v := range vs {
		if i == 10 {
			fmt.Fprintf(&b, "\n  ... and %d more", len(vs)-10)
			break
		}
		fmt.Fprintf(&b, "\n  %s", v)
		for _, e := range v.Events {
			fmt.Fprintf(&b, "\n      %s", e)
		}
	}
	t.Errorf("%s: %d violations (%v):%s", what, len(vs), chaos.ByCheck(vs), b.String())
}

// --- Mutants ---

// chaosMutantEnv names the mutant a child worker installs at start.
const chaosMutantEnv = "DLOCK_CHAOS_MUTANT"

// chaosMutants are deliberately broken variants of the library, which the
// suite must catch (chaos_mutant_test.go). Each installs itself and returns
// the function that restores the correct version.
var chaosMutants = map[string]func() (restore func()){
	// Release by plain DEL, without comparing the owner.
	"release-by-del": swapScript(&scripts.MutexRelease, `redis.call('DEL', KEYS[1]) return 1`),
	// Renew with PEXPIRE, without comparing the owner.
	"extend-without-owner-check": swapScript(&scripts.OwnedExtend,
		`for i = 1, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[2]) end return 1`),
	// Renew with SET: a lost lock comes back.
	"extend-recreates": swapScript(&scripts.OwnedExtend,
		`redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1`),
	// Validity counted from the reply, not from the request.
	"validity-ignores-elapsed": dlock.MutateValidityIgnoringElapsed,
	// Grants and renewals counted whatever WAIT answered: the clients the
	// suite makes then carry ackLiar.
	"ignore-replica-acks": func() func() {
		ignoreReplicaAcks.Store(true)
		return func() { ignoreReplicaAcks.Store(false) }
	},
}

// ignoreReplicaAcks is set by the "ignore-replica-acks" mutant.
var ignoreReplicaAcks atomic.Bool

// ackLiar is the "ignore-replica-acks" mutant: a go-redis hook that makes
// every WAIT report as many replicas as it asked for, which is what a
// library that ignored WAIT's answer would act on. The library itself needs
// no seam for it: WAIT's reply is all it reads.
type ackLiar struct{}

func (ackLiar) DialHook(next redis.DialHook) redis.DialHook { return next }

func (ackLiar) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if ackLie(cmd) {
			return nil
		}
		return err
	}
}

func (ackLiar) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			ackLie(cmd)
		}
		return err
	}
}

// ackLie rewrites a WAIT's reply to the number of replicas it asked for.
func ackLie(cmd redis.Cmder) bool {
	c, ok := cmd.(*redis.Cmd)
	args := cmd.Args()
	if !ok || len(args) < 2 || !strings.EqualFold(argString(args[0]), "wait") || c.Err() != nil {
		return false
	}
	asked, err := strconv.ParseInt(argString(args[1]), 10, 64)
	if err != nil {
		return false
	}
	c.SetVal(asked)
	return true
}

func swapScript(target **driver.Script, src string) func() func() {
	return func() func() {
		orig := *target
		*target = driver.NewScript(src)
		return func() { *target = orig }
	}
}

// installMutant installs mutant in this process until the end of the
// test. Call it before creating any Client; the restore runs after their
// cleanups.
func installMutant(t testing.TB, mutant string) {
	t.Helper()
	m := chaosMutants[mutant]
	if m == nil {
		t.Fatalf("unknown mutant %q", mutant)
	}
	t.Cleanup(m()) // registered first, so it runs after the clients' cleanups
}

// --- Child workers ---

const chaosSpecEnv = "DLOCK_CHAOS_SPEC"

func init() {
	// A worker process: it runs the spec, streaming its events on stdout
	// (chaos.Encoder lines), and exits.
	registerChildMode("chaos-worker", func(ctx context.Context, _ *dlock.Client, _ string, _ func()) error {
		var spec chaosSpec
		if err := json.Unmarshal([]byte(os.Getenv(chaosSpecEnv)), &spec); err != nil {
			return fmt.Errorf("bad %s: %w", chaosSpecEnv, err)
		}
		if m := os.Getenv(chaosMutantEnv); m != "" {
			install := chaosMutants[m]
			if install == nil {
				return fmt.Errorf("unknown mutant %q", m)
			}
			install()
		}
		enc := chaos.NewEncoder(os.Stdout)
		rec := &chaos.Recorder{Sink: func(e chaos.Event) { _ = enc.Encode(e) }}
		if err := runChaosWorker(ctx, spec, rec); err != nil {
			return err
		}
		fmt.Println("chaos-done")
		os.Exit(0)
		return nil
	})
}

// chaosChild is a worker process started by startChaosChild.
type chaosChild struct {
	t    testing.TB
	spec chaosSpec
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and its output is read
	err  error         // the process's exit error, set before done closes

	mu      sync.Mutex
	events  chaos.History
	changed chan struct{} // closed and replaced on every new event
	stderr  strings.Builder
}

// startChaosChild starts a worker process running spec, whose events go to
// rec as they arrive. The process is killed at the end of the test if it is
// still running.
func startChaosChild(t testing.TB, spec chaosSpec, rec *chaos.Recorder) *chaosChild {
	t.Helper()
	if !chaos.SystemWide {
		t.Skip("child workers need a system-wide monotonic clock (Linux)")
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childModeEnv+"=chaos-worker", childAddrEnv+"="+spec.Addrs[0],
		chaosSpecEnv+"="+string(b), chaosMutantEnv+"="+spec.Mutant)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ch := &chaosChild{t: t, spec: spec, cmd: cmd, done: make(chan struct{}), changed: make(chan struct{})}
	cmd.Stderr = &lockedWriter{mu: &ch.mu, b: &ch.stderr}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// As redistest does for servers: fork from a goroutine locked to its own
	// thread that then waits for the child, so that Pdeathsig (sent when the
	// forking thread ends) kills the child only with this test binary.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		decodeErr := chaos.Decode(stdout, func(e chaos.Event) {
			rec.AddAll(chaos.History{e})
			ch.mu.Lock()
			ch.events = append(ch.events, e)
			close(ch.changed)
			ch.changed = make(chan struct{})
			ch.mu.Unlock()
		}, nil)
		ch.err = errors.Join(cmd.Wait(), decodeErr)
		close(ch.done)
	}()
	if err := <-started; err != nil {
		t.Fatalf("starting worker %s: %v", spec.Proc, err)
	}
	t.Cleanup(func() {
		ch.signal(syscall.SIGCONT)
		ch.signal(syscall.SIGKILL)
		<-ch.done
	})
	return ch
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// waitEvent waits until the child has sent an event that matches keep and
// returns it; it fails the test after timeout or if the child exits first.
func (ch *chaosChild) waitEvent(keep func(chaos.Event) bool, timeout time.Duration, what string) chaos.Event {
	ch.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	seen := 0
	for {
		ch.mu.Lock()
		events, changed := ch.events, ch.changed
		ch.mu.Unlock()
		for ; seen < len(events); seen++ {
			if keep(events[seen]) {
				return events[seen]
			}
		}
		select {
		case <-changed:
		case <-ch.done:
			ch.mu.Lock()
			more := len(ch.events) > seen
			ch.mu.Unlock()
			if !more {
				ch.t.Fatalf("worker %s exited (%v) before %s; stderr: %s", ch.spec.Proc, ch.err, what, ch.stderrText())
			}
		case <-deadline.C:
			ch.t.Fatalf("worker %s: no %s within %v; stderr: %s", ch.spec.Proc, what, timeout, ch.stderrText())
		}
	}
}

// wait waits for the child to exit by itself and fails the test if it
// fails or takes longer than timeout.
func (ch *chaosChild) wait(timeout time.Duration) {
	ch.t.Helper()
	select {
	case <-ch.done:
		if ch.err != nil {
			ch.t.Errorf("worker %s: %v; stderr: %s", ch.spec.Proc, ch.err, ch.stderrText())
		}
	case <-time.After(timeout):
		ch.t.Fatalf("worker %s still running after %v; stderr: %s", ch.spec.Proc, timeout, ch.stderrText())
	}
}

func (ch *chaosChild) stderrText() string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.stderr.String()
}

func (ch *chaosChild) signal(sig syscall.Signal) {
	select {
	case <-ch.done:
	default:
		_ = ch.cmd.Process.Signal(sig)
	}
}

// pause stops the child with SIGSTOP and returns once the kernel reports it
// stopped.
func (ch *chaosChild) pause() {
	ch.t.Helper()
	ch.signal(syscall.SIGSTOP)
	if err := waitProcStopped(ch.cmd.Process.Pid, 5*time.Second); err != nil {
		ch.t.Fatal(err)
	}
}

// resume continues a paused child.
func (ch *chaosChild) resume() { ch.signal(syscall.SIGCONT) }

// kill sends SIGKILL and waits until the child is reaped.
func (ch *chaosChild) kill() {
	ch.signal(syscall.SIGKILL)
	<-ch.done
}

// waitProcStopped waits until /proc says pid is stopped by a signal.
func waitProcStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return err
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) && s[i+2] == 'T' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d did not stop within %v", pid, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// chaosParallel lets a scenario run beside other tests in the short tier,
// where it checks invariants against generous bounds on servers of its own.
// The long tier runs the scenarios one at a time, since it publishes their
// timings. TestChaosMutants never runs beside anything: it swaps the
// library's scripts for the whole test binary.
func chaosParallel(t *testing.T) {
	if !chaos.Long() {
		t.Parallel()
	}
}

// --- Reporting ---

// publish writes a section of docs/reliability.md's figures in the long
// tier, and logs it in both.
func publish(t testing.TB, s *chaos.Section) {
	t.Helper()
	t.Logf("figures for %s:\n%s", s.ID, s.Body.String())
	if !chaos.Long() {
		return
	}
	if err := s.Publish(); err != nil {
		t.Errorf("publishing %s: %v", s.ID, err)
	}
}

// seedLine is the first line of every published block: how to replay it.
func seedLine(t testing.TB, seed int64, started time.Time) string {
	return fmt.Sprintf("_Measured by `%s` with base seed %d (test seed %d) in %v; replay with `DLOCK_CHAOS=long go test -run '^%s$' -chaos.seed=%d`._\n\n",
		t.Name(), chaos.BaseSeed(), seed, time.Since(started).Round(100*time.Millisecond), t.Name(), chaos.BaseSeed())
}
