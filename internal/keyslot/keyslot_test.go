package keyslot

import "testing"

func TestOf(t *testing.T) {
	// Values from CLUSTER KEYSLOT on Redis 7.0.
	for key, want := range map[string]int{
		"foo":               12182,
		"bar":               5061,
		"123456789":         12739, // the CRC16/XMODEM check value 0x31C3, mod 16384
		"{foo}.bar":         12182,
		"dlock:{foo}:fence": 12182,
		"{}foo":             Of("{}foo"), // empty tag: the whole key counts
		"dlock:{a}b}":       Of("a"),
		"":                  0,
	} {
		if got := Of(key); got != want {
			t.Errorf("Of(%q) = %d, want %d", key, got, want)
		}
	}
	if Of("{}foo") == Of("foo") {
		t.Error("an empty hash tag must not be used as the tag")
	}
}
