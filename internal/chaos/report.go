package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Durations summarises a sample of durations.
type Durations []time.Duration

// Add appends d.
func (d *Durations) Add(v time.Duration) { *d = append(*d, v) }

// Quantile returns the q-quantile (0..1) by the nearest-rank method, or 0
// for an empty sample.
func (d Durations) Quantile(q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append(Durations(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q*float64(len(s))+0.999999) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}

// Max returns the largest value, or 0.
func (d Durations) Max() time.Duration { return d.Quantile(1) }

// Summary is "p50 x, p99 y, max z (n)".
func (d Durations) Summary() string {
	if len(d) == 0 {
		return "no samples"
	}
	return fmt.Sprintf("p50 %s, p99 %s, max %s (n=%d)", Ms(d.Quantile(0.5)), Ms(d.Quantile(0.99)), Ms(d.Max()), len(d))
}

// Ms formats a duration in milliseconds with one decimal.
func Ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// Section is one block of figures in docs/reliability.md, between the
// markers <!-- chaos:begin ID --> and <!-- chaos:end ID -->.
type Section struct {
	ID   string
	Body strings.Builder
}

// NewSection starts the block ID.
func NewSection(id string) *Section { return &Section{ID: id} }

// Printf appends to the block.
func (s *Section) Printf(format string, args ...any) { fmt.Fprintf(&s.Body, format, args...) }

// Table appends a Markdown table.
func (s *Section) Table(header []string, rows [][]string) {
	s.Printf("| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat("---|", len(header)))
	for _, r := range rows {
		s.Printf("| %s |\n", strings.Join(r, " | "))
	}
}

// Publish writes the block to $DLOCK_CHAOS_REPORT/ID.md when the variable
// is set (the long tier under `make chaos`); otherwise it does nothing.
func (s *Section) Publish() error {
	dir := os.Getenv(ReportEnv)
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, s.ID+".md"), []byte(strings.TrimRight(s.Body.String(), "\n")+"\n"), 0o644)
}

var markerRE = regexp.MustCompile(`(?s)(<!-- chaos:begin ([A-Za-z0-9_.-]+) -->\n).*?(<!-- chaos:end ([A-Za-z0-9_.-]+) -->)`)

// Splice replaces the body of every marked block of doc whose ID has an
// entry in blocks, and leaves everything else, including blocks without
// new figures, as it was. It returns the IDs it replaced and those of
// blocks with no marker in doc.
func Splice(doc string, blocks map[string]string) (out string, replaced, missing []string) {
	seen := map[string]bool{}
	out = markerRE.ReplaceAllStringFunc(doc, func(m string) string {
		sub := markerRE.FindStringSubmatch(m)
		id := sub[2]
		if sub[4] != id {
			return m
		}
		body, ok := blocks[id]
		if !ok {
			return m
		}
		seen[id] = true
		replaced = append(replaced, id)
		return sub[1] + strings.TrimRight(body, "\n") + "\n" + sub[3]
	})
	for id := range blocks {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	sort.Strings(missing)
	return out, replaced, missing
}
