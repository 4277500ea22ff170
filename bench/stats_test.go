package bench

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	d := func(n ...int) []time.Duration {
		var out []time.Duration
		for _, x := range n {
			out = append(out, time.Duration(x))
		}
		return out
	}
	for _, tc := range []struct {
		in   []time.Duration
		q    float64
		want time.Duration
	}{
		{nil, 0.5, 0},
		{d(7), 0.99, 7},
		{d(1, 2, 3, 4), 0.5, 2},
		{d(1, 2, 3, 4), 0.75, 3},
		{d(1, 2, 3, 4), 1, 4},
		{d(1, 2, 3, 4), 0, 1},
		{SortDurations(d(100, 1, 50, 2, 3, 4, 5, 6, 7, 8)), 0.99, 100},
	} {
		if got := Quantile(tc.in, tc.q); got != tc.want {
			t.Errorf("Quantile(%v, %v) = %v, want %v", tc.in, tc.q, got, tc.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		in          []float64
		med, lo, hi float64
		n           int
	}{
		{[]float64{3, 1, 2}, 2, 1, 3, 3},
		{[]float64{4, 1, 2, 3}, 2.5, 1, 4, 4},
		{[]float64{math.NaN(), 5, 1}, 3, 1, 5, 2},
	} {
		s := Summarize(tc.in)
		if s.Median != tc.med || s.Min != tc.lo || s.Max != tc.hi || s.N != tc.n {
			t.Errorf("Summarize(%v) = %+v", tc.in, s)
		}
	}
	if s := Summarize([]float64{math.NaN()}); !math.IsNaN(s.Median) || s.N != 0 {
		t.Errorf("Summarize(NaN) = %+v, want NaN median", s)
	}
}

func TestRatios(t *testing.T) {
	got := Ratios([]float64{10, 20, math.NaN(), 5}, []float64{5, 0, 1, 10})
	want := []float64{2, math.NaN(), math.NaN(), 0.5}
	for i := range want {
		if got[i] != want[i] && !(math.IsNaN(got[i]) && math.IsNaN(want[i])) {
			t.Errorf("Ratios[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	// The median of per-run ratios, not the ratio of medians.
	if s := Summarize(Ratios([]float64{10, 30, 20}, []float64{10, 10, 40})); s.Median != 1 {
		t.Errorf("median ratio = %v, want 1", s.Median)
	}
}

const sampleCommandStats = "# Commandstats\r\n" +
	"cmdstat_get:calls=3,usec=1,usec_per_call=0.33,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_config|resetstat:calls=1,usec=36,usec_per_call=36.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_evalsha:calls=2,usec=66,usec_per_call=33.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_info:calls=9,usec=66,usec_per_call=7.33,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_client|tracking:calls=1,usec=2,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n"

func TestParseCommandStats(t *testing.T) {
	cs, err := ParseCommandStats(sampleCommandStats)
	if err != nil {
		t.Fatal(err)
	}
	want := CommandStats{"get": 3, "evalsha": 2, "client|tracking": 1}
	if len(cs) != len(want) {
		t.Fatalf("got %v, want %v", cs, want)
	}
	for k, v := range want {
		if cs[k] != v {
			t.Errorf("%s = %d, want %d", k, cs[k], v)
		}
	}
	if cs.Total() != 6 {
		t.Errorf("Total = %d, want 6", cs.Total())
	}
	if got := FormatBreakdown(cs.Per(2), 1); got != "get 1.5, evalsha 1.0, client|tracking 0.5" {
		t.Errorf("FormatBreakdown = %q", got)
	}
	if _, err := ParseCommandStats("cmdstat_get:usec=1\n"); err == nil {
		t.Error("a line without calls parsed without error")
	}
}

func TestParseGoBench(t *testing.T) {
	out := `goos: linux
BenchmarkUncontended/floor/g=1-2         	   18991	     95360 ns/op	     706 B/op	      21 allocs/op
BenchmarkUncontended/dlock/g=8-2         	   10000	    143604 ns/op	    4224 B/op	      75 allocs/op
PASS
`
	got, err := ParseGoBench(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	want := []GoBenchResult{
		{Name: "Uncontended/floor/g=1", N: 18991, NsPerOp: 95360, BytesPerOp: 706, AllocsPerOp: 21},
		{Name: "Uncontended/dlock/g=8", N: 10000, NsPerOp: 143604, BytesPerOp: 4224, AllocsPerOp: 75},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{thousands(1234567.4), "1,234,567"},
		{thousands(-1234), "-1,234"},
		{thousands(999), "999"},
		{fmtMs(0.087), "87 µs"},
		{fmtMs(7.114), "7.11 ms"},
		{fmtMs(1465), "1.47 s"},
		{fmtSummary(Summary{Median: 2, Min: 1, Max: 3, N: 3}, fmtRatioValue), "2.00× (1.00×–3.00×)"},
		{fmtSummary(Summary{Median: 2, Min: 2, Max: 2, N: 3}, fmtRatioValue), "2.00×"},
		{fmtSummary(Summarize(nil), fmtRatioValue), "–"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestCCDF(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 1000; i++ {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	pts := ccdf(s, 50)
	if len(pts) < 10 {
		t.Fatalf("only %d points", len(pts))
	}
	if pts[0].X != 1 || pts[0].Y != 1 {
		t.Errorf("first point %+v, want the fastest sample at share 1", pts[0])
	}
	if last := pts[len(pts)-1]; last.X != 1000 || last.Y != 0.001 {
		t.Errorf("last point %+v, want the slowest sample at share 1/n", last)
	}
	for i := 1; i < len(pts); i++ {
		if pts[i].X < pts[i-1].X || pts[i].Y > pts[i-1].Y {
			t.Fatalf("points not monotonic at %d: %+v then %+v", i, pts[i-1], pts[i])
		}
	}
}
