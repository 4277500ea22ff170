package bench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

var (
	instructionsFlag  = flag.Bool("instructions", false, "count redis-server's instructions per lock+unlock pair under callgrind (make instructions runs it)")
	instructionsPairs = flag.Int("pairs", 2000, "lock+unlock pairs counted per target by -instructions")
	instructionsOut   = flag.String("instructions-out", "", "with -instructions, also write the counts to this JSON file (make bench gives it to the report)")
)

// TestServerInstructions counts the instructions redis-server executes per
// uncontended lock+unlock pair of each target, running the server under
// valgrind's callgrind: the server's share of a pair's cost, in a figure
// that repeats to within a fraction of a per cent on a machine whose timings
// drift by tens of per cent (bench/levers.md quotes it). Each target warms
// up (connections, scripts loaded), then its counters are zeroed, it runs
// -pairs pairs on one goroutine, and they are dumped. Redlock targets run
// over this one server, so theirs is the cost per node.
//
// It runs only with -instructions, never in `go test ./...`; with
// -instructions-out it also writes the counts for the report (make bench).
func TestServerInstructions(t *testing.T) {
	if !*instructionsFlag {
		t.Skip("needs valgrind; run with -args -instructions (make instructions does)")
	}
	valgrind, err := exec.LookPath("valgrind")
	if err != nil {
		t.Fatalf("valgrind is not installed (make instructions installs it): %v", err)
	}
	control, err := exec.LookPath("callgrind_control")
	if err != nil {
		t.Fatalf("callgrind_control (valgrind's) is not on PATH: %v", err)
	}
	if *instructionsPairs < 1 {
		t.Fatalf("-pairs %d: want at least 1", *instructionsPairs)
	}
	out := filepath.Join(t.TempDir(), "callgrind.out")
	s := redistest.Start(t, redistest.WithWrapper(valgrind, "--tool=callgrind", "--callgrind-out-file="+out))
	srv := NewServers(s.Addr())
	defer srv.Close()
	pid := strconv.Itoa(s.PID())
	grind := func(args ...string) {
		t.Helper()
		if b, err := exec.Command(control, append(args, pid)...).CombinedOutput(); err != nil {
			t.Fatalf("callgrind_control %s: %v\n%s", strings.Join(args, " "), err, b)
		}
	}

	ctx := context.Background()
	var (
		b       strings.Builder
		floor   float64
		dumps   int
		results []InstructionsResult
	)
	fmt.Fprintf(&b, "redis-server instructions per uncontended lock+unlock pair (callgrind, %d pairs each, one goroutine):\n\n", *instructionsPairs)
	b.WriteString("| target | instructions per pair | ÷ floor |\n|---|--:|--:|\n")
	for i, tg := range selectedTargets(t) {
		if tg.Tuned { // retry settings only matter when the lock is taken
			continue
		}
		l, err := tg.New(Config{Addrs: srv.Addrs})
		if err != nil {
			t.Fatalf("%s: %v", tg.Name, err)
		}
		// Keys of one length: the server's work grows with a key's length.
		keys := []string{fmt.Sprintf("bench:i:%02d", i)}
		if err := runPairs(ctx, l, keys, 300); err != nil {
			t.Fatalf("%s: warm-up: %v", tg.Name, err)
		}
		grind("--zero")
		if err := runPairs(ctx, l, keys, int64(*instructionsPairs)); err != nil {
			t.Fatalf("%s: %v", tg.Name, err)
		}
		grind("--dump=" + tg.Name)
		dumps++
		_ = l.Close()
		n, err := dumpSummary(fmt.Sprintf("%s.%d", out, dumps))
		if err != nil {
			t.Fatalf("%s: %v", tg.Name, err)
		}
		perPair := float64(n) / float64(*instructionsPairs)
		results = append(results, InstructionsResult{Target: tg.Name, Pairs: *instructionsPairs, PerPair: perPair})
		if tg.Kind == KindFloor {
			floor = perPair
		}
		ratio := "–" // no floor among the targets run
		if floor > 0 {
			ratio = fmt.Sprintf("%.2f×", perPair/floor)
		}
		fmt.Fprintf(&b, "| %s | %.1fk | %s |\n", tg.Name, perPair/1000, ratio)
	}
	t.Log("\n" + b.String())
	if *instructionsOut != "" {
		if err := WriteInstructions(*instructionsOut, results); err != nil {
			t.Fatal(err)
		}
	}
}

// dumpSummary reads the instruction count of a callgrind dump: its
// "summary:" line (older valgrinds write only "totals:").
func dumpSummary(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read the callgrind dump: %w", err)
	}
	defer f.Close()
	var totals int64 = -1
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, prefix := range []string{"summary:", "totals:"} {
			if v, ok := strings.CutPrefix(line, prefix); ok {
				n, err := strconv.ParseInt(strings.Fields(v + " 0")[0], 10, 64)
				if err != nil {
					return 0, fmt.Errorf("%s: %q: %w", path, line, err)
				}
				if prefix == "summary:" {
					return n, nil
				}
				totals = n
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if totals < 0 {
		return 0, fmt.Errorf("%s: no summary or totals line", path)
	}
	return totals, nil
}
