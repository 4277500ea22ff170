package ownerid

import "testing"

func TestOwnerValues(t *testing.T) {
	a, err := New("host=h pid=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New("host=h pid=1")
	if a == b {
		t.Fatal("two owner values are equal")
	}
	id, info := Split(a)
	if len(id) != IDLen || info != "host=h pid=1" {
		t.Errorf("Split(%q) = %q, %q", a, id, info)
	}
	bare, _ := New("")
	if len(bare) != IDLen {
		t.Errorf("owner without info %q has length %d", bare, len(bare))
	}
}
