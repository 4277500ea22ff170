// Package dlock provides distributed locks on Redis for services that run as
// many replicas and need "exactly one of us does this now".
//
//	c, err := dlock.New(rdb) // a go-redis v9 client, ContextTimeoutEnabled
//	if err != nil { ... }
//	defer c.Close()
//	lease, err := c.Mutex("orders:1001").Lock(ctx)
//	if err != nil { ... }
//	defer lease.Unlock(ctx)
//
// # Safety model
//
// A lock is a key holding its owner's random token with an expiry (the TTL).
// On one Redis, at most one owner holds a lock at a time; release and renewal
// compare the token atomically, so a lease never frees a lock that passed to
// someone else; and every key expires, so a crashed holder's lock frees itself
// within one TTL. What no TTL lock can promise is that a holder still holds
// the lock while it works: a process paused (GC, a frozen VM) or cut off for
// longer than the TTL wakes up believing it holds a lock that has passed on,
// and Redis replicates asynchronously, so a failover can lose a grant (unless
// WithReplicaAck makes grants wait for the replicas). The watchdog renews
// leases and closes Lease.Done when a lock is lost, but no signal reaches a
// process that is not running. Fencing tokens close that gap: every grant's
// Lease.Token is larger than every earlier token of the same name, so the
// protected resource can refuse a stale holder's writes (package fence does
// this for resources kept in Redis).
//
// # Primitives
//
//   - [Client.Do]: run a function while holding a lock.
//   - [Mutex] and [FairMutex]: an exclusive lock; a FairMutex serves every
//     waiting goroutine in strict arrival order.
//   - [ReentrantMutex]: held by an owner carried by the context ([WithOwner]).
//   - [RWMutex]: many readers or one writer, writer-preferring.
//   - [Semaphore]: at most n permits held at once across processes.
//   - [Latch]: a count-down latch that releases every waiter at zero.
//   - [MultiLock]: several names locked all or none, without deadlock.
//   - [Redlock]: one lock over independent masters (no fencing token).
//   - [Client.Inspect], [Client.List], [Client.ForceUnlock]: for operators.
//
// # Further reading
//
// The README's guarantees table, and in the repository's docs/ directory:
// guide.md (the manual: every guarantee with its limits, options, errors),
// design.md (the package map, then holding, waiting, scripts, deployments
// and Redlock), reliability.md and benchmarks.md.
package dlock
