// Package dlockgocron runs github.com/go-co-op/gocron/v2 jobs exactly once
// across schedulers on several hosts, with dlock on Redis: an Elector
// (NewElector) lets one scheduler, the leader, run every job, and hands
// the schedule to another within the election's TTL when the leader dies.
package dlockgocron
