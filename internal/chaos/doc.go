// Package chaos is the non-test half of dlock's fault-injection suite
// (chaos_test.go and chaos_*_test.go in the root package): the record of
// what every client believed, the clock that stamps it, the checkers that
// judge it offline, seeds, and the figures published in docs/reliability.md.
//
// The suite works the way Jepsen does. Real clients in real processes take
// real locks on real redis-server processes while faults are injected (kill
// -9, SIGSTOP of servers and clients, restarts, SCRIPT FLUSH, a TCP proxy
// that delays, blackholes, resets and holds replies). Every client appends
// what it did and saw to a History of Events, stamped with CLOCK_MONOTONIC,
// which Linux keeps system-wide, so stamps taken in different processes
// compare directly. After the run, pure checkers look for what must never
// happen: overlapping holds, lost updates, stale fenced operations accepted,
// releases or renewals of someone else's lock, lost locks re-created,
// keys without a TTL, fencing tokens going backwards, renewals after
// Unlock. They report exact violations, never "probably": each stamp is
// taken on the side that makes a violation certain (see Event).
package chaos
