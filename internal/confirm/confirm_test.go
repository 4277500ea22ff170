package confirm

import "testing"

func TestExpectForgetTake(t *testing.T) {
	w := Waiters{}
	a := w.Expect([]string{"x", "y"})
	b := w.Expect([]string{"x"})
	w.Forget([]string{"x", "y"}, a)
	if _, ok := w["y"]; ok {
		t.Error("y still awaited after its only confirmation was forgotten")
	}
	got := w.Take("x")
	if len(got) != 1 || got[0] != b[0] {
		t.Errorf("Take(x) = %v, want only the confirmation not forgotten", got)
	}
	if len(w) != 0 {
		t.Errorf("%d channels left after Take, want none", len(w))
	}
}
