package bench

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Series is one library's samples on a chart.
type Series struct {
	Name    string
	Samples []time.Duration // sorted
	Style   draw.LineStyle
}

// family colours, one per library; a library's variants share its colour
// and differ by dashes.
var familyColors = []struct {
	prefix string
	c      color.Color
}{
	{"dlock", color.Black},
	{"floor", color.Gray{Y: 150}},
	{"redsync", color.RGBA{R: 230, G: 120, B: 0, A: 255}},
	{"redislock", color.RGBA{R: 31, G: 119, B: 180, A: 255}},
	{"rueidislock", color.RGBA{R: 160, G: 60, B: 190, A: 255}},
}

// seriesStyle returns the line style of a target: its library's colour,
// dashed for variants, thick for the headline dlock.
func seriesStyle(name string, variant, bold bool) draw.LineStyle {
	st := draw.LineStyle{Color: color.RGBA{R: 200, G: 30, B: 30, A: 255}, Width: vg.Points(1.6)}
	for _, f := range familyColors {
		if strings.HasPrefix(name, f.prefix) {
			st.Color = f.c
			break
		}
	}
	if variant {
		st.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	}
	if bold {
		st.Width = vg.Points(3)
	}
	return st
}

// ccdf returns about n points of the complementary distribution of sorted
// samples: for each x (in ms), the share of samples at least x. Points are
// spaced evenly on a log scale of that share, so the tail keeps its detail.
func ccdf(sorted []time.Duration, n int) plotter.XYs {
	total := len(sorted)
	if total == 0 {
		return nil
	}
	var pts plotter.XYs
	last := -1
	for k := 0; k <= n; k++ {
		// share runs from 1 down to 1/total.
		share := math.Pow(float64(total), -float64(k)/float64(n))
		i := total - int(math.Round(share*float64(total)))
		i = max(0, min(i, total-1))
		if i == last {
			continue
		}
		last = i
		x := ms(sorted[i])
		if x <= 0 {
			continue
		}
		pts = append(pts, plotter.XY{X: x, Y: float64(total-i) / float64(total)})
	}
	return pts
}

// powerTicks are plot.LogTicks labelled cleanly: LogTicks computes its
// powers of ten in floating point and prints 1e-4 as 9.999999999999999e-05.
type powerTicks struct{}

func (powerTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.LogTicks{Prec: -1}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			v := math.Pow10(int(math.Round(math.Log10(ts[i].Value))))
			ts[i].Label = strconv.FormatFloat(v, 'g', -1, 64)
		}
	}
	return ts
}

// ccdfPlot draws one panel: a line per series, log-log, with dashed grey
// lines at the thresholds (ms).
func ccdfPlot(title, xlabel, ylabel string, series []Series, thresholds []float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Y.Label.Position = draw.PosTop
	p.X.Scale = plot.LogScale{}
	p.Y.Scale = plot.LogScale{}
	p.X.Tick.Marker = powerTicks{}
	p.Y.Tick.Marker = powerTicks{}
	p.Add(plotter.NewGrid())
	// The lower left is empty on these charts: nothing is both fast and rare.
	p.Legend.Top = false
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	p.Legend.YOffs = vg.Points(8)
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Legend.ThumbnailWidth = vg.Points(28)

	minY, minX, maxX := 1.0, math.Inf(1), 0.0
	for _, s := range series {
		pts := ccdf(s.Samples, 400)
		if len(pts) == 0 {
			continue
		}
		for _, pt := range pts {
			minY = min(minY, pt.Y)
			minX = min(minX, pt.X)
			maxX = max(maxX, pt.X)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.LineStyle = s.Style
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (n=%d)", s.Name, len(s.Samples)), l)
	}
	for _, th := range thresholds {
		l, err := plotter.NewLine(plotter.XYs{{X: th, Y: minY}, {X: th, Y: 1}})
		if err != nil {
			return nil, err
		}
		l.Color = color.Gray{Y: 110}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		l.Width = vg.Points(1)
		p.Add(l)
		minX, maxX = min(minX, th), max(maxX, th)
	}
	if maxX > 0 {
		p.X.Min, p.X.Max = math.Pow(10, math.Floor(math.Log10(minX))), math.Pow(10, math.Ceil(math.Log10(maxX)))
	}
	p.Y.Min, p.Y.Max = math.Pow(10, math.Floor(math.Log10(minY))), 1
	return p, nil
}

// WriteContendedChart writes a PNG with two panels: hand-off latency and
// wait time, as complementary distributions (share of samples above x), one
// line per library, log-log so that medians and tails both show.
func WriteContendedChart(path, subtitle string, handoffs, waits []Series) error {
	left, err := ccdfPlot("Hand-off latency "+subtitle, "release → next goroutine's grant (ms)",
		"share of hand-offs slower than x", handoffs, []float64{0.1, 0.5})
	if err != nil {
		return err
	}
	right, err := ccdfPlot("Wait per Lock call "+subtitle, "Lock call → grant (ms)",
		"share of waits longer than x", waits, []float64{20})
	if err != nil {
		return err
	}
	img := vgimg.NewWith(vgimg.UseWH(15*vg.Inch, 6.2*vg.Inch), vgimg.UseDPI(110))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Inch / 3, PadTop: vg.Points(6), PadBottom: vg.Points(6),
		PadLeft: vg.Points(6), PadRight: vg.Points(12)}
	left.Draw(tiles.At(dc, 0, 0))
	right.Draw(tiles.At(dc, 1, 0))

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
