package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func (s *Server) logPath() string { return filepath.Join(s.dir, "redis.log") }

func (s *Server) stdoutPath() string { return filepath.Join(s.dir, "stdout.log") }

// newLog returns what the latest process wrote to its log and its output.
func (s *Server) newLog() string {
	var b strings.Builder
	for i, path := range []string{s.logPath(), s.stdoutPath()} {
		data, _ := os.ReadFile(path)
		if off := s.logOffset[i]; off <= int64(len(data)) {
			data = data[off:]
		}
		b.Write(data)
	}
	return b.String()
}

// logTail returns the last lines of the server's log and of its standard
// output (where redis-server reports errors that happen before the log file
// is open, such as a bad argument).
func (s *Server) logTail() string {
	var b strings.Builder
	for _, path := range []string{s.stdoutPath(), s.logPath()} {
		data, err := os.ReadFile(path)
		if err != nil || len(data) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > logTailLines {
			lines = lines[len(lines)-logTailLines:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", path, strings.Join(lines, "\n"))
	}
	if b.Len() == 0 {
		return "(no log output)"
	}
	return b.String()
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// role returns "master", "slave" or "sentinel" as the ROLE command reports it.
func (s *Server) role() (string, error) {
	v, err := ctl(s.Addr(), s.password, "ROLE")
	if err != nil {
		return "", err
	}
	arr, _ := v.([]any)
	if len(arr) == 0 {
		return "", fmt.Errorf("ROLE on %s: unexpected reply %#v", s.Addr(), v)
	}
	r, _ := arr[0].(string)
	return r, nil
}

// info returns one section of INFO.
func (s *Server) info(section string) (string, error) {
	return ctlString(s.Addr(), s.password, "INFO", section)
}

// waitFor polls cond with a short backoff until it returns nil or timeout
// passes, then returns cond's last error.
func waitFor(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	delay := 2 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still not true after %v: %w", timeout, err)
		}
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}
