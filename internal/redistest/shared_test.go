package redistest

import (
	"strings"
	"testing"
)

func TestUniqueName(t *testing.T) {
	t.Parallel()
	a, b := UniqueName(t), UniqueName(t)
	if a == b {
		t.Errorf("two UniqueNames are both %q", a)
	}
	if !strings.HasPrefix(a, t.Name()+"-") || len(a) != len(t.Name())+9 {
		t.Errorf("UniqueName = %q, want %q and 8 hex digits", a, t.Name()+"-")
	}
}
