package chaos

import "testing"

// The checkers of check_tokens.go, on histories built by hand
// (check_test.go's helpers).

// TestLostUpdates: read-modify-writes under the lock, and the final value.
func TestLostUpdates(t *testing.T) {
	runChecks(t, []checkCase{
		{"increments in order", LostUpdates, History{
			{Kind: RMW, Key: "k", Val: 0, OK: true, Hold: "a"}, {Kind: RMW, Key: "k", Val: 1, OK: true, Hold: "b"},
			{Kind: Final, Key: "k", Val: 2},
		}, 0},
		{"two increments read the same value", LostUpdates, History{
			{Kind: RMW, Key: "k", Val: 0, OK: true, Hold: "a"}, {Kind: RMW, Key: "k", Val: 0, OK: true, Hold: "b"},
		}, 1},
		{"final value short", LostUpdates, History{
			{Kind: RMW, Key: "k", Val: 0, OK: true, Hold: "a"}, {Kind: RMW, Key: "k", Val: 1, OK: true, Hold: "b"},
			{Kind: Final, Key: "k", Val: 1},
		}, 1},
		{"a failed increment makes the final value unknowable", LostUpdates, History{
			{Kind: RMW, Key: "k", Val: 0, OK: true, Hold: "a"}, {Kind: RMW, Key: "k", Val: 1, Hold: "b", Err: "timeout"},
			{Kind: Final, Key: "k", Val: 2},
		}, 0},
	})
}

// TestStaleAccepted: a store that accepts an older token after a newer one.
func TestStaleAccepted(t *testing.T) {
	runChecks(t, []checkCase{
		{"the store refuses the stale holder", StaleAccepted, History{
			acq("a", "L", 0, 1, 10), acq("b", "L", 5, 6, 11),
			write("b", "r", 7, 8, 11, true), write("a", "r", 9, 10, 10, false),
		}, 0},
		{"the store accepts the stale holder", StaleAccepted, History{
			acq("a", "L", 0, 1, 10), acq("b", "L", 5, 6, 11),
			write("b", "r", 7, 8, 11, true), write("a", "r", 9, 10, 10, true),
		}, 1},
		{"a stale write that overlapped the new one proves nothing", StaleAccepted, History{
			acq("a", "L", 0, 1, 10), acq("b", "L", 5, 6, 11),
			write("b", "r", 7, 9, 11, true), write("a", "r", 8, 10, 10, true),
		}, 0},
		{"regressed tokens let a stale write in", StaleAccepted, History{
			acq("a", "L", 0, 1, 10), acq("b", "L", 5, 6, 3), // b's token went backwards
			write("b", "r", 7, 8, 3, true), write("a", "r", 9, 10, 10, true),
		}, 1},
		{"concurrent acquisitions are not ordered", StaleAccepted, History{
			acq("a", "L", 0, 6, 10), acq("b", "L", 5, 7, 11),
			write("b", "r", 7, 8, 11, true), write("a", "r", 9, 10, 10, true),
		}, 0},
	})
}

// TestTokenOrder: grants ordered in real time carry increasing tokens.
func TestTokenOrder(t *testing.T) {
	runChecks(t, []checkCase{
		{"tokens increase", TokenOrder, History{acq("a", "L", 0, 1, 5), acq("b", "L", 2, 3, 6)}, 0},
		{"a token goes back", TokenOrder, History{acq("a", "L", 0, 1, 5), acq("b", "L", 2, 3, 4)}, 1},
		{"a token repeats", TokenOrder, History{acq("a", "L", 0, 1, 5), acq("b", "L", 2, 3, 5)}, 1},
		{"concurrent acquisitions may come in any order", TokenOrder, History{acq("a", "L", 0, 3, 5), acq("b", "L", 2, 4, 4)}, 0},
		{"Redlock has no tokens", TokenOrder, History{acq("a", "L", 0, 1, 0), acq("b", "L", 2, 3, 0)}, 0},
	})
}

// TestForeignOps: releases and renewals of a lock another holder holds now.
func TestForeignOps(t *testing.T) {
	runChecks(t, []checkCase{
		{"a late Unlock refused", ForeignOps, History{
			acq("a", "L", 0, 1, 1), acq("b", "L", 5, 6, 2), rel("a", 7, 8, false), rel("b", 9, 10, true),
		}, 0},
		{"a late Unlock that succeeded", ForeignOps, History{
			acq("a", "L", 0, 1, 1), acq("b", "L", 5, 6, 2), rel("a", 7, 8, true), rel("b", 9, 10, true),
		}, 1},
		{"a late Unlock that deleted the successor's key", ForeignOps, History{
			acq("a", "L", 0, 1, 1), acq("b", "L", 5, 6, 2), rel("a", 7, 8, true), rel("b", 9, 10, false),
		}, 1},
		{"an Unlock that handed the lock over", ForeignOps, History{
			acq("a", "L", 0, 1, 1), acq("b", "L", 0, 6, 2), rel("a", 5, 6, true),
		}, 0},
		{"an Unlock concurrent with the next grant", ForeignOps, History{
			acq("a", "L", 0, 1, 1), acq("b", "L", 5, 7, 2), rel("a", 6, 8, true),
		}, 0},
		{"a renewal of the successor's key", ForeignOps, History{
			acq("a", "L", 0, 1, 1), acq("b", "L", 5, 6, 2),
			{Kind: Cmd, Note: "renew", T0: ms(7), T: ms(8), Owner: "owner-a", OK: true},
			rel("b", 9, 10, true),
		}, 1},
		{"a refused renewal", ForeignOps, History{
			acq("a", "L", 0, 1, 1), acq("b", "L", 5, 6, 2),
			{Kind: Cmd, Note: "renew", T0: ms(7), T: ms(8), Owner: "owner-a"},
			rel("b", 9, 10, true),
		}, 0},
		{"a late Unlock of a reader after another reader's grant", ForeignOps, History{
			rd("a", "L", 0, 1, 1), rd("b", "L", 5, 6, 2), rel("a", 7, 8, true), rel("b", 9, 10, true),
		}, 0},
		{"a late Unlock of a reader after a writer's grant", ForeignOps, History{
			rd("a", "L", 0, 1, 1), wr("b", "L", 5, 6, 2), rel("a", 7, 8, true), rel("b", 9, 10, true),
		}, 1},
		{"a late Unlock of a writer after a reader's grant", ForeignOps, History{
			wr("a", "L", 0, 1, 1), rd("b", "L", 5, 6, 2), rel("a", 7, 8, true), rel("b", 9, 10, true),
		}, 1},
	})
}
