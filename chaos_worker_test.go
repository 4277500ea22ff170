//go:build linux

package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/chaos"
)

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

func (r readLocker) Lock(ctx context.Context) (*dlock.Lease, error) { return r.RLock(ctx) }

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
