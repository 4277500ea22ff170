package bench

import (
	"math"
	"sort"
	"time"
)

// Quantile returns the q-quantile (0 ≤ q ≤ 1) of sorted by the nearest-rank
// method, or 0 for an empty slice.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// SortDurations sorts d in place and returns it.
func SortDurations(d []time.Duration) []time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d
}

// Summary is one figure over several runs: its median and range.
type Summary struct {
	Median, Min, Max float64
	N                int
}

// Summarize returns the median and range of vs, ignoring NaNs (a run that
// could not produce the figure).
func Summarize(vs []float64) Summary {
	var xs []float64
	for _, v := range vs {
		if !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return Summary{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	sort.Float64s(xs)
	med := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		med = (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	return Summary{Median: med, Min: xs[0], Max: xs[len(xs)-1], N: len(xs)}
}

// Ratios divides a[i] by b[i], run by run: ratios are taken within a run,
// where both figures saw the same machine load, and summarized afterwards.
func Ratios(a, b []float64) []float64 {
	n := min(len(a), len(b))
	r := make([]float64, n)
	for i := 0; i < n; i++ {
		if b[i] == 0 || math.IsNaN(a[i]) || math.IsNaN(b[i]) {
			r[i] = math.NaN()
			continue
		}
		r[i] = a[i] / b[i]
	}
	return r
}

// ms converts a duration to milliseconds as a float.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
