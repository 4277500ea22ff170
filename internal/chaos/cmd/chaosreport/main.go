// Command chaosreport writes the figures measured by the long tier of the
// fault-injection suite (make chaos) into docs/reliability.md: each block
// the tests published in -dir replaces the body between the markers
// <!-- chaos:begin ID --> and <!-- chaos:end ID --> of the document, and a
// "run" block records the machine and the date. Everything outside the
// markers is left as written.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/chaos"
)

func main() {
	dir := flag.String("dir", "", "directory of the blocks the tests published (DLOCK_CHAOS_REPORT)")
	doc := flag.String("doc", "docs/reliability.md", "the document to update")
	took := flag.Duration("took", 0, "how long the run took, for the run block")
	flag.Parse()
	if err := run(*dir, *doc, *took); err != nil {
		fmt.Fprintln(os.Stderr, "chaosreport:", err)
		os.Exit(1)
	}
}

func run(dir, doc string, took time.Duration) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no figures in %q: did the long tier run (DLOCK_CHAOS=long DLOCK_CHAOS_REPORT=%s)?", dir, dir)
	}
	blocks := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		blocks[strings.TrimSuffix(filepath.Base(f), ".md")] = string(b)
	}
	blocks["run"] = runBlock(len(files), took)
	old, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	out, replaced, missing := chaos.Splice(string(old), blocks)
	if err := os.WriteFile(doc, []byte(out), 0o644); err != nil {
		return err
	}
	fmt.Printf("chaosreport: updated %s: %s\n", doc, strings.Join(replaced, ", "))
	if len(missing) > 0 {
		fmt.Printf("chaosreport: no marker in %s for: %s (add <!-- chaos:begin ID --> ... <!-- chaos:end ID --> to publish them)\n", doc, strings.Join(missing, ", "))
	}
	return nil
}

// runBlock describes the machine and the run.
func runBlock(sections int, took time.Duration) string {
	redis := "redis-server not found"
	if out, err := exec.Command("redis-server", "--version").Output(); err == nil {
		redis = strings.TrimSpace(string(out))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Last run: %s, `make chaos`", time.Now().UTC().Format("2006-01-02"))
	if took > 0 {
		fmt.Fprintf(&b, " (%v)", took.Round(time.Second))
	}
	fmt.Fprintf(&b, ", %d scenarios. Machine: %s/%s, %d CPUs, %s; %s.\n", sections, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), redis)
	return b.String()
}
