package bench

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCPUShareSeesOtherProcesses: a busy loop that is not the test's
// descendant (its shell exits, so it is reparented) counts as another
// process's CPU; the test's own spinning does not.
func TestCPUShareSeesOtherProcesses(t *testing.T) {
	s0 := sampleCPU()
	if !s0.ok {
		t.Skip("no /proc/stat here")
	}
	out, err := exec.Command("sh", "-c", "(while :; do :; done) >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	s0 = sampleCPU()
	for end := time.Now().Add(time.Second); time.Now().Before(end); { // this process's own work
	}
	s := sampleCPU()
	other, _, ok := s.others(s0)
	if !ok || other < 10 {
		t.Errorf("a busy loop beside the test: others %.0f%% of one CPU (ok %v), want at least 10%%", other, ok)
	}
	if own := s.own - s0.own; own < 100*time.Millisecond {
		t.Errorf("the test spun for 1 s and counts %v of its own CPU", own)
	}
	if got := s.since(s0); !strings.HasPrefix(got, "other processes ") {
		t.Errorf("since = %q", got)
	}
}
