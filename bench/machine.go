package bench

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// Machine describes where a report ran.
type Machine struct {
	CPUs      int
	CPUModel  string
	MemoryGiB float64
	Kernel    string
	OSArch    string
	Go        string
	Redis     string
	// Modules maps module paths to the versions this binary was built with.
	Modules map[string]string
	// Load is the load average before and after the run, as the machine is
	// shared.
	Load string
	// Beside is what other processes and the host (steal) took of the
	// CPUs while the run went on (cpuShare).
	Beside string
	// Commit is the repository's HEAD; Dirty says whether dlock's own Go
	// files differed from it when the report ran.
	Commit string
	Dirty  bool
}

// DescribeMachine gathers the machine's and the build's facts; repo is the
// repository root (for the commit). Facts it cannot find stay empty.
func DescribeMachine(ctx context.Context, srv *Servers, repo string) Machine {
	m := Machine{
		CPUs:    runtime.NumCPU(),
		OSArch:  runtime.GOOS + "/" + runtime.GOARCH,
		Go:      runtime.Version(),
		Modules: map[string]string{},
	}
	m.CPUModel = procField("/proc/cpuinfo", "model name")
	if kb, err := strconv.ParseFloat(strings.Fields(procField("/proc/meminfo", "MemTotal") + " 0")[0], 64); err == nil {
		m.MemoryGiB = kb / (1 << 20)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if srv != nil {
		m.Redis, _ = srv.Version(ctx)
	}
	// Test binaries carry no dependency list in their build info, so ask
	// the go command, from the bench module's directory, what it selected.
	if out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Path}} {{.Version}}", "all").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if path, ver, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
				m.Modules[path] = ver
			}
		}
	}
	if out, err := exec.CommandContext(ctx, "git", "-C", repo, "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
	}
	// Only dlock's own code matters to its figures: the root package and
	// its internal packages, not the docs or the bench module.
	if out, err := exec.CommandContext(ctx, "git", "-C", repo, "status", "--porcelain", "--",
		"*.go", "*.lua", "go.mod", ":!bench", ":!cmd").Output(); err == nil {
		m.Dirty = strings.TrimSpace(string(out)) != ""
	}
	return m
}

// LoadAvg returns the 1, 5 and 15 minute load averages from /proc/loadavg.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// procField returns the value of the first "name : value" line of a /proc
// file.
func procField(path, name string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
