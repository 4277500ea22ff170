package bench

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// GoBenchResult is one line of `go test -bench -benchmem` output.
type GoBenchResult struct {
	// Name is the benchmark's name without the "Benchmark" prefix and the
	// -GOMAXPROCS suffix, e.g. "Uncontended/dlock/g=8".
	Name        string
	N           int64
	NsPerOp     float64
	BytesPerOp  float64
	AllocsPerOp float64
}

// ParseGoBench reads `go test -bench` output and returns its benchmark
// lines in order; other lines are skipped.
func ParseGoBench(r io.Reader) ([]GoBenchResult, error) {
	var out []GoBenchResult
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		res := GoBenchResult{Name: strings.TrimPrefix(f[0], "Benchmark"), N: n}
		if i := strings.LastIndexByte(res.Name, '-'); i > 0 {
			if _, err := strconv.Atoi(res.Name[i+1:]); err == nil {
				res.Name = res.Name[:i]
			}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				res.NsPerOp = v
			case "B/op":
				res.BytesPerOp = v
			case "allocs/op":
				res.AllocsPerOp = v
			}
		}
		out = append(out, res)
	}
	return out, sc.Err()
}
