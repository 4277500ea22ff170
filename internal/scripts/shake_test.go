package scripts

import (
	"regexp"
	"strings"
	"testing"
)

// libHelpers is every helper the lib files define.
func libHelpers() map[string]bool {
	names := map[string]bool{}
	for _, lib := range []string{fenceFuncs, lockLibBody, rwLib, semLib, reentrantLib, latchLib} {
		for _, c := range libChunks(lib) {
			if c.name != "" {
				names[c.name] = true
			}
		}
	}
	return names
}

// TestShakeKeepsCalledHelpers: every lib helper a script calls is defined
// in it, ahead of the call.
func TestShakeKeepsCalledHelpers(t *testing.T) {
	helpers := libHelpers()
	call := regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\(`)
	for name, s := range all {
		src := s.Source()
		for _, line := range strings.Split(src, "\n") {
			code, _, _ := strings.Cut(line, "--")
			for _, m := range call.FindAllStringSubmatch(code, -1) {
				if !helpers[m[1]] || strings.Contains(code, "local function "+m[1]+"(") {
					continue
				}
				def := strings.Index(src, "local function "+m[1]+"(")
				if def < 0 || def > strings.Index(src, line) {
					t.Errorf("%s calls %s, which it does not define before the call", name, m[1])
				}
			}
		}
	}
}

// TestShakeLeavesOutUncalledHelpers: a script does not define the helpers
// it never calls, which Redis would define on every call of it.
func TestShakeLeavesOutUncalledHelpers(t *testing.T) {
	for _, c := range []struct{ script, helper string }{
		{"MutexRelease", "dlock_enqueue"},
		{"MutexAcquire", "dlock_released_but"},
		{"QueueKeep", "dlock_grant"},
	} {
		if strings.Contains(all[c.script].Source(), "local function "+c.helper+"(") {
			t.Errorf("%s defines %s, which it never calls", c.script, c.helper)
		}
	}
}

// TestShakeIsCheap: shake runs for every script at package init, in every
// program that imports dlock: a few allocations (the lib's parts, the kept
// text), not one per word or line.
func TestShakeIsCheap(t *testing.T) {
	lib := lockLib + "\n" + rwLib
	if n := testing.AllocsPerRun(10, func() { shake(lib, rwAcquire) }); n > 16 {
		t.Errorf("shake made %.0f allocations, want at most 16", n)
	}
}

// TestShakeTellsWholeNames: a helper whose name begins another's is kept
// only when named itself.
func TestShakeTellsWholeNames(t *testing.T) {
	lib := "local function f_a()\nend\nlocal function f_ab()\nend\n"
	if got, want := shake(lib, "f_ab()"), "local function f_ab()\nend\n"; got != want {
		t.Errorf("shake kept %q, want %q", got, want)
	}
	if got := shake(lib, "f_a()"); !strings.Contains(got, "f_a()") || strings.Contains(got, "f_ab") {
		t.Errorf("shake kept %q, want f_a alone", got)
	}
}
