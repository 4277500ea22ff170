package bench

import (
	"strings"
	"testing"
)

// TestFamilySection checks the family's verdicts on primitivesResults,
// whose FairMutex makes half the Mutex's pairs and hands off in 1 ms: each
// row names the kinds that miss, with their figures, and a row whose
// figures the run lacks is left out.
func TestFamilySection(t *testing.T) {
	res := primitivesResults()
	res.Instructions = []InstructionsResult{{Target: "dlock", PerPair: 80000}, {Target: "dlock-fair", PerPair: 100000}}
	const heading = "## dlock's family against its targets"
	sec := section((&view{res: res}).markdown(), heading)
	if sec == "" {
		t.Fatalf("no section %q", heading)
	}
	want := map[string][]string{
		"uncontended, 1 goroutine(s): ≥ 0.9× the Mutex's pairs/s":                 {"fair 0.50×", "**missed**: fair 0.50×"},
		"contended, strict order: hand-off p50 ≤ 0.15 ms":                         {"fair 1.00 ms", "**missed**: fair 1.00 ms"},
		"contended, strict order: ≤ 3 commands sent per acquisition":              {"fair 0.00", "met"},
		"server instructions per pair ≤ 1.3× the Mutex's":                         {"fair 1.25×", "met"},
		"waiting: ≤ 150 commands/s executed by Redis while 1,000 goroutines wait": {"dlock 10, fair 66", "met"},
	}
	for target, w := range want {
		r := rows(sec, target)
		if len(r) != 1 || len(r[0]) != 3 || r[0][1] != w[0] || r[0][2] != w[1] {
			t.Errorf("row %q: %q, want measured %q, status %q", target, r, w[0], w[1])
		}
	}
	// No contended kind of the Mutex's targets ran: their rows say so.
	if r := rows(sec, "contended: ≥ 0.9× the Mutex's acquisitions/s"); len(r) != 1 || r[0][2] != "not measured" {
		t.Errorf("contended rate row %q, want it not measured", r)
	}

	res.Instructions[1].PerPair = 120000
	sec = section((&view{res: res}).markdown(), heading)
	if r := rows(sec, "server instructions per pair ≤ 1.3× the Mutex's"); len(r) != 1 || r[0][2] != "**missed**: fair 1.50×" {
		t.Errorf("instructions row %q, want fair missing at 1.50×", r)
	}
	res.Instructions = nil
	if sec := section((&view{res: res}).markdown(), heading); strings.Contains(sec, "server instructions") {
		t.Errorf("a run without instruction counts judges them:\n%s", sec)
	}
}
