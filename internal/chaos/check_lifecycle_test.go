package chaos

import "testing"

// The checkers of check_lifecycle.go, on histories built by hand
// (check_test.go's helpers).

// TestReentries: nested holds of a reentrant lock keep its token and succeed
// while it is held.
func TestReentries(t *testing.T) {
	runChecks(t, []checkCase{
		{"nested holds that succeed", Reentries, History{
			acq("a", "L", 0, 1, 7), reenter("a", "lock", 2, 3, 7, true), reenter("a", "lock", 4, 5, 7, true),
			reenter("a", "unlock", 6, 7, 0, true), reenter("a", "unlock", 8, 9, 0, true), rel("a", 10, 11, true),
		}, 0},
		{"a nested lock refused", Reentries, History{
			acq("a", "L", 0, 1, 7), reenter("a", "lock", 2, 3, 0, false), rel("a", 10, 11, true),
		}, 1},
		{"a nested unlock refused", Reentries, History{
			acq("a", "L", 0, 1, 7), reenter("a", "lock", 2, 3, 7, true), reenter("a", "unlock", 6, 7, 0, false),
		}, 1},
		{"a nested lock with another token", Reentries, History{
			acq("a", "L", 0, 1, 7), reenter("a", "lock", 2, 3, 8, true), reenter("a", "unlock", 6, 7, 0, true),
		}, 1},
	})
}

// TestRecreatedAndUnreported: a wiped lock stays gone, and its holder hears
// of the loss.
func TestRecreatedAndUnreported(t *testing.T) {
	runChecks(t, []checkCase{
		{"a wiped lock stays gone", both(Recreated, Unreported), History{
			acq("a", "L", 0, 1, 1), {Kind: Fault, Note: "wipe", T: ms(5)},
			{Kind: Probe, T0: ms(6), T: ms(7), Key: "k", Val: -2},
			{Kind: Lost, T: ms(8), Hold: "a"},
		}, 0},
		{"a wiped lock comes back", Recreated, History{
			acq("a", "L", 0, 1, 1), {Kind: Fault, Note: "wipe", T: ms(5)},
			{Kind: Probe, T0: ms(6), T: ms(7), Key: "k", Owner: "owner-a", Val: 900},
		}, 1},
		{"a grant after the wipe is new", Recreated, History{
			acq("a", "L", 4, 6, 1), {Kind: Fault, Note: "wipe", T: ms(5)},
			{Kind: Probe, T0: ms(7), T: ms(8), Key: "k", Owner: "owner-a", Val: 900},
		}, 0},
		{"a wiped lock never reported", Unreported, History{
			acq("a", "L", 0, 1, 1), {Kind: Fault, Note: "wipe", T: ms(5)},
		}, 1},
		{"a wiped lock whose Unlock failed otherwise", Unreported, History{
			acq("a", "L", 0, 1, 1), {Kind: Fault, Note: "wipe", T: ms(5)},
			{Kind: Release, T0: ms(6), T: ms(7), Hold: "a", Err: "error: connection refused"},
		}, 1},
		{"a lock released while the wipe began", Unreported, History{
			acq("a", "L", 0, 1, 1), {Kind: Fault, Note: "wipe", T0: ms(4), T: ms(6)}, rel("a", 5, 5, true),
		}, 0},
		{"a probe during the wipe proves nothing", Recreated, History{
			acq("a", "L", 0, 1, 1), {Kind: Fault, Note: "wipe", T0: ms(4), T: ms(6)},
			{Kind: Probe, T0: ms(5), T: ms(5), Key: "k", Owner: "owner-a", Val: 900},
		}, 0},
		{"a wiped lock reported by Unlock", Unreported, History{
			acq("a", "L", 0, 1, 1), {Kind: Fault, Note: "wipe", T: ms(5)}, rel("a", 9, 10, false),
		}, 0},
		{"a lock released before the wipe", Unreported, History{
			acq("a", "L", 0, 1, 1), rel("a", 2, 3, true), {Kind: Fault, Note: "wipe", T: ms(5)},
		}, 0},
	})
}

// TestEarlyWaits: no latch's Await returns before its last CountDown.
func TestEarlyWaits(t *testing.T) {
	runChecks(t, []checkCase{
		{"a latch released after its last count-down", earlyWaits(2), History{
			{Kind: CountDown, Lock: "l", T0: ms(1), T: ms(2), OK: true}, {Kind: CountDown, Lock: "l", T0: ms(3), T: ms(4), OK: true},
			{Kind: Await, Lock: "l", Note: "returned", T0: ms(0), T: ms(4), OK: true},
		}, 0},
		{"a latch released before its last count-down", earlyWaits(2), History{
			{Kind: CountDown, Lock: "l", T0: ms(1), T: ms(2), OK: true},
			{Kind: Await, Lock: "l", Note: "returned", T0: ms(0), T: ms(3), OK: true},
			{Kind: CountDown, Lock: "l", T0: ms(5), T: ms(6), OK: true},
		}, 1},
		{"a wait that failed proves nothing", earlyWaits(2), History{
			{Kind: Await, Lock: "l", Note: "returned", T0: ms(0), T: ms(3)},
		}, 0},
	})
}

// TestNoTTL: keys left without a TTL.
func TestNoTTL(t *testing.T) {
	runChecks(t, []checkCase{
		{"keys with TTLs", NoTTL, History{{Kind: Probe, Key: "k", Val: 300}, {Kind: Probe, Key: "gone", Val: -2}}, 0},
		{"a key without TTL", NoTTL, History{{Kind: Probe, Key: "k", Val: -1}}, 1},
	})
}

// TestRenewAfterRelease: renewals sent after the release.
func TestRenewAfterRelease(t *testing.T) {
	runChecks(t, []checkCase{
		{"renewal before the release", RenewAfterRelease, History{
			{Kind: Cmd, Note: "renew", T0: ms(1), T: ms(3), Owner: "o"},
			{Kind: Cmd, Note: "release", T0: ms(3), T: ms(4), Owner: "o"},
		}, 0},
		{"renewal after the release", RenewAfterRelease, History{
			{Kind: Cmd, Note: "release", T0: ms(3), T: ms(4), Owner: "o"},
			{Kind: Cmd, Note: "renew", T0: ms(5), T: ms(6), Owner: "o"},
		}, 1},
	})
}

// TestLateLosses: a loss signalled later than its bound after the deadline.
func TestLateLosses(t *testing.T) {
	runChecks(t, []checkCase{
		{"a loss on time", lateLosses(ms(50)), History{
			{Kind: Lost, T: ms(140), Deadline: ms(100), Hold: "a"},
		}, 0},
		{"a late loss", lateLosses(ms(50)), History{
			{Kind: Lost, T: ms(151), Deadline: ms(100), Hold: "a"},
		}, 1},
	})
}

// The lifecycle checkers that take settings, with them given.

func earlyWaits(n int) func(History) []Violation {
	return func(h History) []Violation { return EarlyWaits(h, n) }
}

func lateLosses(slack int64) func(History) []Violation {
	return func(h History) []Violation { return LateLosses(h, slack) }
}

// both finds what a and b find in one history.
func both(a, b func(History) []Violation) func(History) []Violation {
	return func(h History) []Violation { return append(a(h), b(h)...) }
}
