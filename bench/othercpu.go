package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cpuShare samples the machine's CPU time from /proc (Linux), so that a
// report can tell what it ran beside: the share of the run that other
// processes took, and the steal, the time a virtual machine's host gave
// elsewhere. Either halves a 2-core machine's figures while it lasts, and
// the load average cannot tell the run's own work from another's.
type cpuShare struct {
	at               time.Time
	busy, steal, own time.Duration // ticks are 1/100 s (USER_HZ)
	ok               bool
}

const clockTick = 10 * time.Millisecond

func sampleCPU() cpuShare {
	s := cpuShare{at: time.Now()}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return s
	}
	for i, v := range f[1:9] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return s
		}
		switch i {
		case 3, 4: // idle, iowait
		case 7:
			s.steal = time.Duration(n) * clockTick
		default:
			s.busy += time.Duration(n) * clockTick
		}
	}
	s.own, s.ok = treeCPU(os.Getpid()), true
	return s
}

// treeCPU is the CPU time of pid and its live descendants (the
// redis-servers a run starts), with what its exited children used.
func treeCPU(pid int) time.Duration {
	parent := map[int]int{}
	cpu := map[int]time.Duration{}
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15) cutime(16) cstime(17)
		_, rest, ok := strings.Cut(string(b), ") ")
		f := strings.Fields(rest)
		if !ok || len(f) < 15 {
			continue
		}
		id, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		parent[id], _ = strconv.Atoi(f[1])
		var t int64
		for _, v := range f[11:13] { // utime, stime
			n, _ := strconv.ParseInt(v, 10, 64)
			t += n
		}
		if id == pid {
			for _, v := range f[13:15] { // cutime, cstime
				n, _ := strconv.ParseInt(v, 10, 64)
				t += n
			}
		}
		cpu[id] = time.Duration(t) * clockTick
	}
	var total time.Duration
	for id, t := range cpu {
		for p := id; p > 1; p = parent[p] {
			if p == pid {
				total += t
				break
			}
		}
	}
	return total
}

// others returns what other processes and the host (steal) took between
// s0 and s, in percent of one CPU; ok is false where /proc is not there.
func (s cpuShare) others(s0 cpuShare) (other, steal float64, ok bool) {
	wall := s.at.Sub(s0.at)
	if !s.ok || !s0.ok || wall <= 0 {
		return 0, 0, false
	}
	pct := func(d time.Duration) float64 { return 100 * float64(d) / float64(wall) }
	return pct(max(s.busy-s0.busy-(s.own-s0.own), 0)), pct(s.steal - s0.steal), true
}

// since describes others for the report; "" where /proc is not there.
func (s cpuShare) since(s0 cpuShare) string {
	other, steal, ok := s.others(s0)
	if !ok {
		return ""
	}
	return fmt.Sprintf("other processes %.0f%% of one CPU, steal %.0f%%, over %v", other, steal, s.at.Sub(s0.at).Round(time.Second))
}
