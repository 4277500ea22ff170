package redistest

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// recorder is a testing.TB whose Fatal records the message and ends the
// calling goroutine instead of failing the test, so tests can check how the
// harness fails. Use it only on a goroutine of its own.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed bool
	msg    string
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.failed = true
	r.msg += fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
