package sale

import (
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plot draws each report's throughput (top) and p50/p99 latency (bottom)
// over time since its first request, one colour per report, as a PNG.
func Plot(w io.Writer, reps []*Report) error {
	rps := plot.New()
	rps.Title.Text = "Throughput"
	rps.X.Label.Text = "seconds since the first request"
	rps.Y.Label.Text = "answers / s"
	lat := plot.New()
	lat.Title.Text = "Latency (solid p50, dashed p99)"
	lat.X.Label.Text = "seconds since the first request"
	lat.Y.Label.Text = "ms"
	for i, r := range reps {
		if len(r.Timeline) == 0 {
			continue
		}
		name := r.Target + " " + r.Scenario
		tp, p50, p99 := make(plotter.XYs, len(r.Timeline)), make(plotter.XYs, len(r.Timeline)), make(plotter.XYs, len(r.Timeline))
		for j, b := range r.Timeline {
			x := b.At.Seconds()
			tp[j] = plotter.XY{X: x, Y: b.RPS}
			p50[j] = plotter.XY{X: x, Y: float64(b.P50.Microseconds()) / 1000}
			p99[j] = plotter.XY{X: x, Y: float64(b.P99.Microseconds()) / 1000}
		}
		c := plotutil.Color(i)
		if err := addLine(rps, tp, c, false, name); err != nil {
			return err
		}
		if err := addLine(lat, p50, c, false, name+" p50"); err != nil {
			return err
		}
		if err := addLine(lat, p99, c, true, ""); err != nil {
			return err
		}
	}
	rps.Y.Min, lat.Y.Min = 0, 0
	rps.Legend.Top = true
	lat.Legend.Top = true
	img := vgimg.New(vg.Points(900), vg.Points(800))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Points(10), PadY: vg.Points(10),
		PadTop: vg.Points(10), PadBottom: vg.Points(10), PadLeft: vg.Points(10), PadRight: vg.Points(10)}
	plots := [][]*plot.Plot{{rps}, {lat}}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	return nil
}

func addLine(p *plot.Plot, xys plotter.XYs, c color.Color, dashed bool, legend string) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("plot line: %w", err)
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	if dashed {
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	p.Add(l)
	if legend != "" {
		p.Legend.Add(legend, l)
	}
	return nil
}
