package redistest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServersDieWithCrashedTestBinary runs a child test binary that starts a
// server and exits without any cleanup, as a crash or a -timeout would, and
// checks that Pdeathsig took the server down with it.
func TestServersDieWithCrashedTestBinary(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Pdeathsig is Linux-only")
	}
	if os.Getenv("REDISTEST_CRASH_CHILD") != "" {
		t.Skip("already the child")
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	// The child's own temporary directory (its server's) under this test's:
	// the child exits without cleaning up, so in the system's it would stay.
	cmd.Env = append(os.Environ(), "REDISTEST_CRASH_CHILD=1", "TMPDIR="+t.TempDir())
	out, err := cmd.Output()
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Fatalf("child exited with %d (%v), want 3; output:\n%s", code, err, out)
	}
	var pid int
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "server pid "); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	if pid == 0 {
		t.Fatalf("child did not report a server pid; output:\n%s", out)
	}
	err = waitFor(5*time.Second, func() error {
		if alive(pid) {
			return fmt.Errorf("redis-server %d still alive", pid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCrashChild is the child of TestServersDieWithCrashedTestBinary.
func TestCrashChild(t *testing.T) {
	if os.Getenv("REDISTEST_CRASH_CHILD") == "" {
		t.Skip("helper for TestServersDieWithCrashedTestBinary")
	}
	s := Start(t)
	// From a goroutine that is not the one that started the server, and
	// after that goroutine's thread may have been reused: only the
	// starter's thread matters, and it lives as long as the server.
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread() // exits with its thread, like a cgo callback or netns user
		close(done)
	}()
	<-done
	time.Sleep(50 * time.Millisecond)
	if !s.Running() {
		fmt.Println("server died when an unrelated locked thread exited")
		os.Exit(4)
	}
	fmt.Printf("server pid %d\n", s.PID())
	os.Exit(3) // no cleanup, no deferred functions
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
