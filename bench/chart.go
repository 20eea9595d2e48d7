package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// systemColor gives each system a fixed color.
func systemColor(system string) color.Color {
	switch system {
	case "courier":
		return color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	case "watermill":
		return color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	case "river":
		return color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	}
	return color.Gray{Y: 0x80}
}

// median returns the median of figure id for system, or 0.
func median(res *Results, id, system string) float64 {
	st, _ := res.Stat(id, system)
	return st.Median
}

// barPanel draws one bar per system in each group (group i is figure
// ids[i]). With refID, a dashed horizontal line marks that reference
// figure.
func barPanel(res *Results, systems []string, title, ylabel string, groups, ids []string, refID, refLabel string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Y.Tick.Marker = readableTicks{}
	w := vg.Points(20)
	top := 0.0
	for k, s := range systems {
		vals := make(plotter.Values, len(ids))
		for i, id := range ids {
			vals[i] = median(res, id, s)
			top = max(top, vals[i])
		}
		bc, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, err
		}
		bc.Color = systemColor(s)
		bc.LineStyle.Width = 0
		bc.Offset = w * vg.Length(float64(k)-float64(len(systems)-1)/2)
		p.Add(bc)
		p.Legend.Add(displayName(s), bc)
	}
	if refID != "" {
		if v := median(res, refID, reference); v > 0 {
			top = max(top, v)
			l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: v}, {X: float64(len(groups)) - 0.5, Y: v}})
			if err != nil {
				return nil, err
			}
			l.Color = color.Gray{Y: 0x40}
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(l)
			p.Legend.Add(refLabel, l)
		}
	}
	if top > 0 {
		p.Y.Max = 1.3 * top // room for the legend
	}
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.NominalX(groups...)
	return p, nil
}

// readableTicks are the default ticks labelled without needless decimals.
type readableTicks struct{}

// Ticks implements plot.Ticker.
func (readableTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label == "" {
			continue
		}
		if hi-lo >= 10 {
			ticks[i].Label = thousands(int64(math.Round(ticks[i].Value)))
		} else {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'g', 4, 64)
		}
	}
	return ticks
}

// dots are a system's medians with min–max whiskers, placed at group
// positions shifted by an offset.
type dots struct {
	x, y, lo, hi []float64
}

// Len implements plotter.XYer.
func (d dots) Len() int { return len(d.x) }

// XY implements plotter.XYer.
func (d dots) XY(i int) (float64, float64) { return d.x[i], d.y[i] }

// YError implements plotter.YErrorer.
func (d dots) YError(i int) (float64, float64) { return d.y[i] - d.lo[i], d.hi[i] - d.y[i] }

// latencyPanel draws latency percentiles on a log scale, one dot per system
// with its range.
func latencyPanel(res *Results, systems []string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Commit→publish latency (log scale)"
	p.Y.Label.Text = "ms"
	ids := []string{"lat1000_p50", "lat1000_p99", "lat1000_p999", "lat5000_p50", "lat5000_p99", "lat5000_p999"}
	groups := []string{"p50 @1k/s", "p99 @1k/s", "p999 @1k/s", "p50 @5k/s", "p99 @5k/s", "p999 @5k/s"}
	plotted := false
	for k, s := range systems {
		var d dots
		for i, id := range ids {
			st, ok := res.Stat(id, s)
			if !ok || st.Min <= 0 {
				continue
			}
			d.x = append(d.x, float64(i)+0.2*(float64(k)-float64(len(systems)-1)/2))
			d.y = append(d.y, st.Median)
			d.lo = append(d.lo, st.Min)
			d.hi = append(d.hi, st.Max)
		}
		if d.Len() == 0 {
			continue
		}
		sc, err := plotter.NewScatter(d)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle.Color = systemColor(s)
		sc.GlyphStyle.Radius = vg.Points(3.5)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		eb, err := plotter.NewYErrorBars(d)
		if err != nil {
			return nil, err
		}
		eb.LineStyle.Color = systemColor(s)
		p.Add(sc, eb)
		p.Legend.Add(displayName(s), sc)
		plotted = true
	}
	if plotted { // a log scale needs data
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.NominalX(groups...)
	return p, nil
}

// writeChart draws the main figures into one PNG.
func writeChart(path string, res *Results, systems []string) error {
	type panel func() (*plot.Plot, error)
	panels := []panel{
		func() (*plot.Plot, error) {
			return barPanel(res, systems, "Drain throughput", "msg/s", []string{"10,000 keys", "1 key"},
				[]string{"drain_keys10000", "drain_keys1"}, "", "")
		},
		func() (*plot.Plot, error) { return latencyPanel(res, systems) },
		func() (*plot.Plot, error) {
			return barPanel(res, systems, "Write path, 8 writers", "business tx/s", []string{"insert + outbox message"},
				[]string{"write_tx"}, "ref_plain_insert", "plain insert")
		},
		func() (*plot.Plot, error) {
			return barPanel(res, systems, "CPU per 100k messages (drain)", "CPU seconds", []string{"relay process", "PostgreSQL backends", "nats-server"},
				[]string{"cpu_relay", "cpu_pg", "cpu_nats"}, "", "")
		},
		func() (*plot.Plot, error) {
			return barPanel(res, systems, "Database side alone (no broker)", "msg/s", []string{"claim + mark"},
				[]string{"limit_db"}, "ref_pg_queue", "SKIP LOCKED queue")
		},
		func() (*plot.Plot, error) {
			return barPanel(res, systems, "Broker side alone (no database)", "msg/s", []string{"publish + ack"},
				[]string{"limit_broker"}, "ref_js_async", "raw async publish")
		},
	}
	const rows, cols = 3, 2
	plots := make([][]*plot.Plot, rows)
	for r := range rows {
		plots[r] = make([]*plot.Plot, cols)
		for c := range cols {
			p, err := panels[r*cols+c]()
			if err != nil {
				return fmt.Errorf("panel %d: %w", r*cols+c, err)
			}
			plots[r][c] = p
		}
	}
	img := vgimg.New(vg.Points(900), vg.Points(1000))
	dc := draw.New(img)
	t := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(20), PadY: vg.Points(20),
		PadTop: vg.Points(10), PadBottom: vg.Points(10), PadLeft: vg.Points(10), PadRight: vg.Points(10)}
	canvases := plot.Align(plots, t, dc)
	for r := range rows {
		for c := range cols {
			plots[r][c].Draw(canvases[r][c])
		}
	}
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
