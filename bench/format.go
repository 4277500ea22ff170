package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// thousands formats v rounded to an integer with thin separators: 12 345.
func thousands(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString(",")
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// fmtMs formats a duration given in milliseconds with a unit that suits it.
func fmtMs(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v < 1:
		return fmt.Sprintf("%.0f µs", v*1000)
	case v < 10:
		return fmt.Sprintf("%.2f ms", v)
	case v < 1000:
		return fmt.Sprintf("%.0f ms", v)
	}
	return fmt.Sprintf("%.2f s", v/1000)
}

func fmtFloat(digits int) func(float64) string {
	return func(v float64) string {
		if math.IsNaN(v) {
			return "–"
		}
		return strconv.FormatFloat(v, 'f', digits, 64)
	}
}

func fmtRatioValue(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v)
}

func fmtPercent(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}

// fmtSummary renders "median (min–max)", or only the median when the runs
// agree or there was one.
func fmtSummary(s Summary, f func(float64) string) string {
	if math.IsNaN(s.Median) {
		return "–"
	}
	lo, hi := f(s.Min), f(s.Max)
	if s.N <= 1 || lo == hi {
		return f(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.Median), lo, hi)
}

// table renders a Markdown table.
type table struct {
	head []string
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// numeric reports whether column i holds figures (right-aligned): every cell
// starts with a digit or is a dash.
func (t *table) numeric(i int) bool {
	if i == 0 || len(t.rows) == 0 {
		return false
	}
	for _, r := range t.rows {
		if i >= len(r) {
			continue
		}
		c := strings.TrimPrefix(r[i], "**")
		if c == "" || !(c[0] >= '0' && c[0] <= '9' || strings.HasPrefix(c, "–") || strings.HasPrefix(c, "-")) {
			return false
		}
	}
	return true
}

func (t *table) String() string {
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" " + strings.ReplaceAll(c, "|", "\\|") + " |")
		}
		b.WriteString("\n")
	}
	line(t.head)
	b.WriteString("|")
	for i := range t.head {
		if t.numeric(i) {
			b.WriteString("--:|")
		} else {
			b.WriteString("---|")
		}
	}
	b.WriteString("\n")
	for _, r := range t.rows {
		line(r)
	}
	return b.String()
}
