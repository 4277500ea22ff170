package redistest

import "testing"

func TestSharedNodeAddrs(t *testing.T) {
	t.Parallel()
	addrs := SharedNodeAddrs(3)
	if len(addrs) != 3 || addrs[0] == addrs[1] || addrs[1] == addrs[2] || addrs[0] == addrs[2] {
		t.Fatalf("SharedNodeAddrs(3) = %v, want 3 distinct servers", addrs)
	}
	if addrs[0] == SharedAddr() {
		t.Error("a shared node is the Shared server")
	}
	if again := SharedNodeAddrs(2); again[0] != addrs[0] || again[1] != addrs[1] {
		t.Errorf("SharedNodeAddrs(2) = %v after %v, want the same servers", again, addrs)
	}
	// Independent: a key written on one is not on the others.
	key := "redistest:" + t.Name()
	if _, err := ctl(addrs[0], "", "SET", key, "1", "PX", "60000"); err != nil {
		t.Fatal(err)
	}
	for _, addr := range addrs[1:] {
		if v, err := ctl(addr, "", "EXISTS", key); err != nil || v != int64(0) {
			t.Errorf("%s: EXISTS = %v, %v; want 0", addr, v, err)
		}
	}
}
