package main

import (
	"fmt"
	"image/color"
	"os"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// writeKeysChart draws the drains of the brokers and cdc sections over
// their key counts (-keys): one line per broker, and per relay of the cdc
// section, throughput against keys on a logarithmic axis. A dip below a
// line's neighbours is a batch shape the relay handles worse than those on
// either side of it.
func writeKeysChart(path string, res *Results, cfg config) error {
	keys := slices.Sorted(slices.Values(drainKeys))
	p := plot.New()
	p.Title.Text = "Relay drain by key count (messages spread over the keys, interleaved)"
	p.X.Label.Text = "keys"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Label.Text = "msg/s"
	p.Y.Min = 0
	p.Y.Tick.Marker = readableTicks{}
	p.Legend.Top = true
	type line struct {
		label string
		id    func(keys int) string
		cell  string
	}
	var lines []line
	for _, br := range cfg.brokers {
		lines = append(lines, line{brokerLabel(br) + " (polling)", func(k int) string { return brokerFigure("drain", k) }, br})
	}
	for _, m := range [][2]string{{cdcPolling, "Polling relay (cdc section)"}, {cdcLog, "CDC relay (cdc section)"}} {
		lines = append(lines, line{m[1], func(k int) string { return fmt.Sprintf("cdc_drain_keys%d", k) }, m[0]})
	}
	drawn, top := 0, 0.0
	for _, l := range lines {
		var pts plotter.XYs
		for _, k := range keys {
			if st, ok := res.Stat(l.id(k), l.cell); ok && st.Median > 0 {
				pts = append(pts, plotter.XY{X: float64(k), Y: st.Median})
				top = max(top, st.Median)
			}
		}
		if len(pts) < 2 {
			continue
		}
		ln, pt, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		c := lineColor(drawn)
		ln.Color, pt.Color = c, c
		pt.Shape = draw.CircleGlyph{}
		p.Add(ln, pt)
		p.Legend.Add(l.label, ln, pt)
		drawn++
	}
	if drawn == 0 {
		return nil
	}
	p.Y.Max = top * (1.15 + 0.06*float64(drawn)) // room for the legend above the lines
	img := vgimg.New(vg.Points(900), vg.Points(520))
	p.Draw(draw.New(img))
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

// lineColor gives the i-th line of a chart a color of its own.
func lineColor(i int) color.Color {
	palette := []color.RGBA{
		{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xd6, 0x27, 0x28, 0xff},
		{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
	}
	return palette[i%len(palette)]
}
