package hold

import (
	"errors"
	"testing"

	"github.com/dlock-go/dlock/internal/errs"
)

// The first loss callbacks live in the lease's own slots and the rest on
// the heap: whatever the mix, a dropped callback never runs, every other
// one runs once with the loss, and none is kept once the lease is lost.
func TestLossCallbacksInSlotsAndBeyond(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		for drop := 0; drop < n; drop++ {
			wd := NewWatchdog(nil)
			var l Lease
			l.Init(wd, testHost{}, "owner", Settings{TTL: 1}, nil)
			ran := make([]int, n)
			ids := make([]LossID, n)
			for i := range ids {
				i := i
				ids[i] = l.OnLoss(func(err error) {
					if !errors.Is(err, errs.ErrLockLost) {
						t.Errorf("n=%d: callback %d ran with %v", n, i, err)
					}
					ran[i]++
				})
			}
			l.DropLoss(ids[drop])
			l.DropLoss(ids[drop]) // dropped already: nothing happens
			l.Lose("test")
			for i, c := range ran {
				if want := 1; i == drop {
					want = 0
					if c != want {
						t.Errorf("n=%d: dropped callback %d ran %d times", n, i, c)
					}
				} else if c != want {
					t.Errorf("n=%d, dropped %d: callback %d ran %d times, want once", n, drop, i, c)
				}
			}
			for i, lf := range l.lossSlots {
				if lf.f != nil {
					t.Errorf("n=%d: slot %d keeps its callback after the loss", n, i)
				}
			}
			if l.lossFuncs != nil {
				t.Errorf("n=%d: %d callbacks kept after the loss", n, len(l.lossFuncs))
			}
			late := 0
			l.OnLoss(func(error) { late++ }) // lost already: runs at once
			if late != 1 {
				t.Errorf("n=%d: a callback added after the loss ran %d times", n, late)
			}
			wd.Close()
		}
	}
}
