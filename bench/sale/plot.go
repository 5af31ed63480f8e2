package sale

import (
	"fmt"
	"image/color"
	"io"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plot draws throughput (top row) and p50/p99 latency (bottom row) over
// time since each sale's first request, one column per scenario and one
// colour per target, as a PNG.
func Plot(w io.Writer, reps []*Report) error {
	var scenarios, targets []string
	for _, r := range reps {
		if !slices.Contains(scenarios, r.Scenario) {
			scenarios = append(scenarios, r.Scenario)
		}
		if !slices.Contains(targets, r.Target) {
			targets = append(targets, r.Target)
		}
	}
	if len(scenarios) == 0 {
		return fmt.Errorf("plot: no sales")
	}
	plots := [][]*plot.Plot{make([]*plot.Plot, len(scenarios)), make([]*plot.Plot, len(scenarios))}
	for i, sc := range scenarios {
		rps, lat := plot.New(), plot.New()
		rps.Title.Text = sc + ": throughput"
		rps.Y.Label.Text = "answers / s"
		lat.Title.Text = sc + ": latency (solid p50, dashed p99)"
		lat.Y.Label.Text = "ms"
		for _, p := range []*plot.Plot{rps, lat} {
			p.X.Label.Text = "seconds since the first request"
			p.Y.Min = 0
			p.Legend.Top = true
		}
		plots[0][i], plots[1][i] = rps, lat
	}
	for _, r := range reps {
		if len(r.Timeline) == 0 {
			continue
		}
		col := slices.Index(scenarios, r.Scenario)
		if n := len(r.Timeline); n < MinPlotPoints {
			// Said on the plot itself: a curve of a few points misleads
			// whoever reads the picture without the run's output.
			for _, p := range []*plot.Plot{plots[0][col], plots[1][col]} {
				p.Title.Text += fmt.Sprintf("\n%s: only %d points; a longer run (more --users, or --rate) draws a curve", r.Target, n)
			}
		}
		c := plotutil.Color(slices.Index(targets, r.Target))
		tp, p50, p99 := make(plotter.XYs, len(r.Timeline)), make(plotter.XYs, len(r.Timeline)), make(plotter.XYs, len(r.Timeline))
		for j, b := range r.Timeline {
			x := b.At.Seconds()
			tp[j] = plotter.XY{X: x, Y: b.RPS}
			p50[j] = plotter.XY{X: x, Y: float64(b.P50.Microseconds()) / 1000}
			p99[j] = plotter.XY{X: x, Y: float64(b.P99.Microseconds()) / 1000}
		}
		if err := addLine(plots[0][col], tp, c, false, r.Target); err != nil {
			return err
		}
		if err := addLine(plots[1][col], p50, c, false, r.Target); err != nil {
			return err
		}
		if err := addLine(plots[1][col], p99, c, true, ""); err != nil {
			return err
		}
	}
	img := vgimg.New(vg.Points(float64(520*len(scenarios))), vg.Points(760))
	dc := draw.New(img)
	pad := vg.Points(10)
	tiles := draw.Tiles{Rows: 2, Cols: len(scenarios), PadX: pad, PadY: pad, PadTop: pad, PadBottom: pad, PadLeft: pad, PadRight: pad}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		for j := range plots[i] {
			plots[i][j].Draw(canvases[i][j])
		}
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

// PlotQueue draws a waiting-room sale over time from the room's opening,
// as a PNG: admissions and OK grabs a second (top), and the line's length
// as the service reported it (bottom), the sale's begin marked in both.
func PlotQueue(w io.Writer, r *Report) error {
	q := r.Queue
	if q == nil || len(q.Timeline) == 0 {
		return fmt.Errorf("plot: no waiting-room timeline")
	}
	rates, line := plot.New(), plot.New()
	rates.Title.Text = fmt.Sprintf("%s %s: %d early + %d late users, %d units, %d admitted a second, %d open at most",
		r.Target, r.Scenario, q.Early, q.Late, r.Expect.Stock, q.AdmitPerSecond, q.MaxActive)
	rates.Y.Label.Text = "per second"
	line.Title.Text = "waiting in line (the service's count, as users last heard it)"
	line.Y.Label.Text = "users"
	var adm, ok, waiting plotter.XYs
	top, most := 0.0, 0.0
	var width time.Duration
	if len(q.Timeline) > 1 {
		width = q.Timeline[1].At - q.Timeline[0].At
	}
	for _, b := range q.Timeline {
		x := (b.At + width/2).Seconds() // each slice at its middle

		adm = append(adm, plotter.XY{X: x, Y: b.AdmitPerSecond})
		ok = append(ok, plotter.XY{X: x, Y: b.OKPerSecond})
		top = max(top, b.AdmitPerSecond, b.OKPerSecond)
		if b.Waiting >= 0 {
			waiting = append(waiting, plotter.XY{X: x, Y: float64(b.Waiting)})
			most = max(most, float64(b.Waiting))
		}
	}
	begin := q.Begin.Sub(q.Open).Seconds()
	for _, p := range []*plot.Plot{rates, line} {
		p.X.Label.Text = "seconds since the room opened"
		p.Y.Min = 0
		p.Legend.Top = true
	}
	if err := addLine(rates, adm, plotutil.Color(0), false, "admissions"); err != nil {
		return err
	}
	if err := addLine(rates, ok, plotutil.Color(1), false, "grabs OK"); err != nil {
		return err
	}
	if len(waiting) > 0 {
		if err := addLine(line, waiting, plotutil.Color(2), false, "waiting"); err != nil {
			return err
		}
	}
	for _, m := range []struct {
		p   *plot.Plot
		top float64
	}{{rates, top}, {line, most}} {
		if err := addLine(m.p, plotter.XYs{{X: begin, Y: 0}, {X: begin, Y: max(m.top, 1)}}, color.Gray{Y: 120}, true, "sale begins"); err != nil {
			return err
		}
	}
	plots := [][]*plot.Plot{{rates}, {line}}
	img := vgimg.New(vg.Points(720), vg.Points(640))
	dc := draw.New(img)
	pad := vg.Points(10)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: pad, PadY: pad, PadTop: pad, PadBottom: pad, PadLeft: pad, PadRight: pad}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	return nil
}
