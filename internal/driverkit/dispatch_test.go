package driverkit

import (
	"context"
	"testing"
	"time"
)

// TestLeaveEarly pins which callers can stop waiting before their round
// trip ends: a batched call waits on copies when its context has a
// deadline, or can end on a library that never times out; a direct call
// gets a goroutine of its own in those cases, unless the library enforces
// the deadline itself.
func TestLeaveEarly(t *testing.T) {
	background := context.Background()
	cancelOnly, cancel := context.WithCancel(background)
	defer cancel()
	withDeadline, cancel2 := context.WithTimeout(background, time.Minute)
	defer cancel2()

	type want struct{ batched, goroutine [3]bool } // background, cancel-only, deadline
	for _, tc := range []struct {
		ends Ends
		want want
	}{
		{Ends{Timeouts: true}, want{[3]bool{false, false, true}, [3]bool{false, false, true}}},
		{Ends{Deadline: true, Timeouts: true}, want{[3]bool{false, false, true}, [3]bool{false, false, false}}},
		{Ends{}, want{[3]bool{false, true, true}, [3]bool{false, true, true}}},
		{Ends{Deadline: true}, want{[3]bool{false, true, true}, [3]bool{false, true, false}}},
	} {
		d := &Driver[int]{lib: Lib[int]{Ends: tc.ends}}
		for i, ctx := range []context.Context{background, cancelOnly, withDeadline} {
			leave := d.LeaveEarly(ctx)
			goroutine := leave && !d.enforcesDeadline(ctx)
			if leave != tc.want.batched[i] || goroutine != tc.want.goroutine[i] {
				t.Errorf("%+v, context %d: batched call leaves early %v, direct call in a goroutine %v; want %v, %v",
					tc.ends, i, leave, goroutine, tc.want.batched[i], tc.want.goroutine[i])
			}
		}
	}
}
