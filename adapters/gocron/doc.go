// Package dlockgocron runs github.com/go-co-op/gocron/v2 jobs exactly once
// across schedulers on several hosts, with dlock on Redis, in either of
// gocron's two ways: a Locker (NewLocker) lets the first scheduler to fire
// a tick run it, holding the job's lock for a minimum time so that the
// others, firing the same tick moments later, skip it; an Elector
// (NewElector) lets one scheduler, the leader, run every job, and hands
// the schedule to another within the election's TTL when the leader dies.
package dlockgocron
