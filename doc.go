// Package dlock provides distributed locks on Redis for services that run as
// many replicas and need "exactly one of us does this now".
//
// # Quick start
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	c, err := dlock.New(rdb)
//	if err != nil { ... }
//	defer c.Close()
//
//	err = c.Do(ctx, "orders:1001", func(ctx context.Context) error {
//		// Only one process runs this at a time. ctx is cancelled if the
//		// lock is lost.
//		return process(ctx, 1001)
//	})
//
// Or hold a lease explicitly:
//
//	lease, err := c.Mutex("orders:1001").Lock(ctx) // waits; TryLock does not
//	if err != nil { ... }
//	defer lease.Unlock(ctx)
//	store.Write(ctx, data, lease.Token()) // fenced write, see below
//
// # What a lock guarantees, and what it cannot
//
// A lock is a key holding the owner's random 128-bit token with an expiry
// (the TTL). At any moment at most one owner's token is in the key, so on one
// Redis server two holders are never granted the same lock at once; release
// and renewal compare the token atomically, so a lease never releases or
// extends a lock that passed to someone else, and a lost lock is never
// re-created by its old holder. Nothing stays locked forever: every key has
// an expiry, and a crashed holder's lock frees itself within one TTL.
//
// A TTL lock cannot promise that its holder still holds it while it works.
// A process can pause (GC, swapping, a stopped VM) or lose the network for
// longer than the TTL; the lock expires, another process takes it, and the
// paused one wakes up believing it still holds it. The watchdog (on by
// default) renews the lock every TTL/3 and closes Lease.Done as soon as a
// renewal fails or the local validity deadline passes (acquire time + TTL −
// drift, on the monotonic clock), but no signal can reach a process that is
// not running. Replication adds a second gap: Redis replicates
// asynchronously, so after a failover the new master may not know a lock
// the old one granted. WithReplicaAck closes it: a grant or renewal then
// counts only once that many replicas have acknowledged it (WAIT, on the
// connection that wrote), so the replica promoted in a failover (by
// Sentinel, or by Redis Cluster for a shard) knows every lock held. An
// acquire that too few replicas acknowledged releases the lock again and
// fails with ErrReplicaAck; an unacknowledged renewal does not extend the
// lease. The README compares the deployments and what each guarantees.
//
// Fencing tokens close the gap for resources that can check them. Every
// grant of a lock carries a token (Lease.Token) that is strictly larger than
// every earlier token of the same name (except a Redlock's, see below). Pass it with every read and write to
// the protected resource, and have the resource reject any token lower than
// the highest it has seen, e.g. in SQL:
//
//	UPDATE stock SET qty = $1, fence = $2 WHERE id = $3 AND fence <= $2
//
// A paused holder that wakes up with an old token is then refused instead of
// overwriting its successor's work.
//
// # Key layout
//
// With the default prefix "dlock:", the lock named N uses these keys, all
// sharing the Cluster hash tag {N} so that one script can touch them
// together on Redis Cluster:
//
//	dlock:{N}          the holder's owner value ("<128-bit hex>;<owner info>") with PX expiry
//	dlock:{N}:fence    the last fencing token issued (kept max(1h, 2×TTL): see LockInfo.LastToken)
//	dlock:{N}:q        waiters in arrival order (sorted set, scored by server time)
//	dlock:{N}:w        each waiter's lease in the queue (hash)
//
// Release notifications are published on the channel dlock:{N} (with
// SPUBLISH, sharded pub/sub, on a Cluster of Redis 7.0 or later). Change the
// prefix with WithKeyPrefix. Names may not be empty, longer than MaxNameLen,
// or start with '}'. A name may contain braces: its hash tag is then the
// part before its first '}', so "{cart:7}:items" and "{cart:7}:total" share
// a Cluster slot and a MultiLock takes both in one script. Mutex, FairMutex
// and MultiLock share these keys and exclude each other; the other kinds of
// lock keep keys of their own under the same tag (ReentrantMutex:
// dlock:{N}:re, with dlock:{N}:re:holds, the ids of the holder's holds).
//
// # Waiting
//
// Waiters queue in Redis in arrival order. Unlock hands the lock straight to
// the first live waiter and tells it through the Client's one shared pub/sub
// subscription, so a waiter holds the lock within a round trip of the
// release, and no newcomer can barge in between. Waiters also refresh their
// place in the queue every WithWaiterLease/3 and look again when the
// holder's key expires, so a lost message or a crashed holder costs latency,
// never a hang. SpinWait replaces pub/sub with polling for deployments that
// have none. Goroutines of one Client waiting for one Mutex share one place
// in the queue, and an Unlock may pass the lock straight to the next of them
// (at most 7 times in a row, then the queue is served): see Mutex.
// FairMutex keeps strict arrival order across goroutines.
//
// # Redlock
//
// NewRedlock takes one client per independent Redis master (no replication
// between them; usually 3 or 5) and makes locks that are held while a quorum
// (N/2+1) of the nodes hold the lock's key, dlock:{N} on each node; nothing
// else is stored. An acquisition asks every node at once, each request
// bounded by the node timeout (WithNodeTimeout), and succeeds when a quorum
// granted it with validity left: TTL − elapsed − drift, where drift is TTL ×
// WithDriftFactor + 2ms and elapsed runs on the monotonic clock from before
// the first request. Otherwise it releases whatever it got, on every node,
// before it returns. A waiting Lock is woken by the holder's release, which
// publishes on every node, and asks again; only the first of one Redlock's
// Lock calls for a name waits on the nodes, the others take their turns
// behind it in arrival order, and an Unlock by the same Redlock hands the
// lock straight to that first waiter (a bounded number of times in a row,
// so other processes get their chance). After a split vote, or while too
// few nodes
// answer, it retries after a random delay (WithRetryDelay) instead.
// Renewals need a quorum within the validity as well, and
// loss is signalled as for a single node. Unlock releases on every node. A
// Redlock lock thus survives the loss of a minority of the nodes, where a
// lock on one replicated master can vanish in a failover.
//
// Its safety rests on two more assumptions. The nodes' clocks must advance at
// about the rate of ours (the drift allowance covers 1% by default); a clock
// that jumps ahead expires keys early. And a node must never come back
// holding fewer keys than it granted: keep a restarted node down for longer
// than the longest TTL in use, or run it with appendfsync always.
//
// Redlock leases have no fencing token: Lease.Token returns 0. Independent
// nodes share no counter, and no combination of per-node values increases
// across grants won on different quorums or after a node restart. Where the
// protected resource must be fenced, lock on one deployment with New and use
// its tokens; Redlock buys availability, not fencing.
//
// # Errors
//
// Every call takes a context, which must not be nil (as in the standard
// library, a nil context panics). Errors match the sentinels with errors.Is
// and carry the lock name and the details: ErrNotObtained (held by someone else, or a wait ended by ctx,
// joined then with the context's error), ErrNotHeld (the lease no longer
// owns the key), ErrLockLost (lost while held, with the reason),
// ErrInvalidArgument (rejected before anything was sent, except a Semaphore
// request above the limit stored in Redis, or an AddPermits that would take
// it out of range), ErrKeyConflict
// (a key of the lock holds something dlock did not write; it is never
// modified, and an Unlock that reports it beside the lock key has still
// released the lock), ErrClosed. TryLock returns a failure to reach Redis,
// and a ctx done before its reply, wrapped, never matching ErrNotObtained, so
// contention, outages and cancellation are told apart at once.
// A wait (Lock, Client.Do, Latch.Wait, ...) retries such failures while ctx
// allows, so when ctx ends it the error matches ErrNotObtained and ctx's
// error even during an outage; it also wraps the last attempt's failure when
// that attempt failed (see ErrNotObtained). Redlock adds ErrQuorum (too few
// nodes answered), which carries a *NodeError per failed node;
// WithReplicaAck adds ErrReplicaAck (too few replicas acknowledged); a
// Latch.Wait on a latch that expired while counting returns ErrLatchExpired.
//
// A failure to reach Redis leaves the outcome of a change unknown: Redis may
// have run the call before its reply was lost. For the calls that count
// (Latch.CountDown, Latch.TrySetCount, Semaphore.AddPermits) a retry could
// then count twice; give them a WithIdempotencyKey, and a retry with the
// same key takes effect once.
package dlock
