package dashboard

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier/store"
)

// The plot spans x 48…712 and y 160 (0) … 8 (max).
func TestChartGeometry(t *testing.T) {
	a := axes{from: t0, to: t0.Add(100 * time.Second), max: 10}
	for _, c := range []struct {
		d      time.Duration
		v      float64
		wx, wy float64
	}{
		{0, 0, 48, 160},
		{50 * time.Second, 5, 380, 84},
		{100 * time.Second, 10, 712, 8},
		{25 * time.Second, 2.5, 214, 122},
		{time.Second, 1 / 3.0, 54.64, 154.93}, // rounded to hundredths
	} {
		if x, y := a.x(t0.Add(c.d)), a.y(c.v); x != c.wx || y != c.wy {
			t.Errorf("(%s, %g) drawn at (%g, %g), want (%g, %g)", c.d, c.v, x, y, c.wx, c.wy)
		}
	}

	// Known values make a polyline; an unknown one breaks it, and a lone
	// point is a dot as well.
	got := a.lines([]value{
		{at: t0, v: 0, ok: true},
		{at: t0.Add(50 * time.Second), v: 5, ok: true},
		{at: t0.Add(75 * time.Second)},
		{at: t0.Add(100 * time.Second), v: 10, ok: true},
	})
	want := []line{{Points: "48,160 380,84"}, {Points: "712,8", Dot: &dot{712, 8}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("lines %+v, want %+v", got, want)
	}
	if got := a.lines(nil); got != nil {
		t.Fatalf("no values drew %+v, want no line", got)
	}
	if got := a.lines([]value{{at: t0}, {at: t0.Add(time.Second)}}); got != nil {
		t.Fatalf("unknown values drew %+v, want no line", got)
	}

	// A y axis up to 0: everything on the bottom line.
	zero := axes{from: t0, to: t0.Add(time.Minute)}
	if got := zero.lines([]value{{at: t0, ok: true}, {at: t0.Add(time.Minute), ok: true}}); len(got) != 1 || got[0].Points != "48,160 712,160" {
		t.Fatalf("zeros with max 0 drew %+v, want 48,160 712,160", got)
	}
	// No time span: the newest is at the right edge.
	if x := (axes{from: t0, to: t0}).x(t0); x != plotRight {
		t.Fatalf("a single reading drawn at x %g, want %d", x, plotRight)
	}
}

func TestNiceMax(t *testing.T) {
	for v, want := range map[float64]float64{0: 0, -3: 0, 1: 1, 3: 5, 7: 10, 10: 10, 11: 20, 0.3: 0.5, 250: 500, 1999: 2000} {
		if got := niceMax(v); got != want {
			t.Errorf("niceMax(%g) = %g, want %g", v, got, want)
		}
	}
}

func TestTicks(t *testing.T) {
	var labels []string
	var xs []float64
	for _, k := range ticks(time.Hour) {
		labels, xs = append(labels, k.Label), append(xs, k.X)
	}
	if want := []string{"−60 min", "−45 min", "−30 min", "−15 min", "now"}; !reflect.DeepEqual(labels, want) {
		t.Fatalf("labels %q, want %q", labels, want)
	}
	if want := []float64{48, 214, 380, 546, 712}; !reflect.DeepEqual(xs, want) {
		t.Fatalf("x %v, want %v", xs, want)
	}
	if got := ticks(time.Minute)[1].Label; got != "−45 s" {
		t.Fatalf("a minute's second label is %q, want −45 s", got)
	}
}

// handler is a Handler with cfg defaulted, for the charts.
func handlerOf(every, history time.Duration) *Handler {
	cfg := Config{SampleEvery: every, History: history}
	cfg.setDefaults()
	return &Handler{cfg: cfg}
}

// chartOf returns the chart of trs whose id is id.
func chartOf(t *testing.T, trs trends, id string) chart {
	t.Helper()
	for _, c := range trs.Charts {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("no chart %s among %d", id, len(trs.Charts))
	return chart{}
}

// points returns the points of each line of the series named name.
func points(c chart, name string) []string {
	for _, s := range c.Series {
		if s.Name == name {
			var out []string
			for _, l := range s.Lines {
				out = append(out, l.Points)
			}
			return out
		}
	}
	return nil
}

func TestCharts(t *testing.T) {
	h := handlerOf(10*time.Second, 40*time.Second)
	// Four readings 10s apart; the y axes: pending up to 5 (4 rounded
	// up), the oldest's wait up to 50s, published up to 5/s, failures up
	// to 20/min.
	rs := []reading{
		{at: t0, topics: []topicReading{{"orders", 2, 10 * time.Second}}, published: store.Count{N: 100}, dead: 0, parked: 0},
		{at: t0.Add(10 * time.Second), topics: []topicReading{{"orders", 4, 20 * time.Second}, {"audit", 1, time.Second}}, published: store.Count{N: 150}, dead: 3, parked: 1},
		{at: t0.Add(20 * time.Second), topics: []topicReading{{"audit", 3, 40 * time.Second}}, other: topicReading{pending: 2, oldest: 5 * time.Second}, published: store.Count{N: 40}, dead: 1, parked: 1},
		{at: t0.Add(30 * time.Second), topics: []topicReading{{"orders", 1, 5 * time.Second}}, published: store.Count{N: 60}, dead: 2, parked: 0},
	}
	trs := h.trendsOf(rs, false)
	if trs.Readings != 4 || trs.Span != "30s" {
		t.Fatalf("%d readings over %s, want 4 over 30s", trs.Readings, trs.Span)
	}

	// The x axis: 40s back from the newest, so the first reading is at
	// x 214; the y axis: 0…5 pending.
	p := chartOf(t, trs, "chart-pending")
	if p.YMax != "5" {
		t.Fatalf("pending up to %s, want 5", p.YMax)
	}
	// orders is unknown in the third reading (others were summed and it
	// is not named); audit is 0 where it was not pending and the reading
	// named every topic.
	if got, want := points(p, "orders"), []string{"214,99.2 380,38.4", "712,129.6"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("orders drawn %q, want %q", got, want)
	}
	if got, want := points(p, "audit"), []string{"214,160 380,129.6 546,68.8 712,160"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("audit drawn %q, want %q", got, want)
	}
	// The others: the summed 2 of the third reading, nothing elsewhere.
	other := p.Series[len(p.Series)-1]
	if !other.Other || strings.Join(points(p, "other topics"), "|") != "214,160 380,160 546,99.2 712,160" {
		t.Fatalf("the others drawn %+v", other)
	}
	if p.Series[0].Name != "orders" || p.Series[0].Latest != "1 pending" {
		t.Fatalf("the first series is %s, newest %q; want orders (the highest peak), 1 pending", p.Series[0].Name, p.Series[0].Latest)
	}

	o := chartOf(t, trs, "chart-oldest")
	if got, want := points(o, "audit"), []string{"214,160 380,156.96 546,38.4 712,160"}; o.YMax != "50" || !reflect.DeepEqual(got, want) {
		t.Fatalf("audit's oldest drawn %q up to %s, want %q up to 50", got, o.YMax, want)
	}

	// Published: 5/s, then a drop (unknown), then 2/s.
	pub := chartOf(t, trs, "chart-published")
	if got, want := points(pub, "published"), []string{"380,8", "712,99.2"}; pub.Empty != "" || pub.YMax != "5" || !reflect.DeepEqual(got, want) {
		t.Fatalf("published drawn %q up to %s (empty: %q), want %q up to 5", got, pub.YMax, pub.Empty, want)
	}

	// Failures: dead letters +3, −2 (0), +1 per 10s: 18, 0, 6 per minute.
	f := chartOf(t, trs, "chart-failures")
	if got, want := points(f, "dead letters"), []string{"380,23.2 546,160 712,114.4"}; f.YMax != "20" || !reflect.DeepEqual(got, want) {
		t.Fatalf("dead letters drawn %q up to %s, want %q up to 20", got, f.YMax, want)
	}
	if got := f.Series[0].Latest; got != "6/min" {
		t.Fatalf("the newest dead letters' rate says %q, want 6/min", got)
	}
	if !strings.Contains(f.Note, "replay") {
		t.Fatalf("the failures chart's note does not say a replay hides new ones: %q", f.Note)
	}
}

func TestChartsEmpty(t *testing.T) {
	h := handlerOf(10*time.Second, time.Minute)
	// One reading, nothing pending: every chart says why it is empty, its
	// y axis up to 0.
	trs := h.trendsOf([]reading{{at: t0}}, false)
	for _, c := range trs.Charts {
		if c.Empty == "" || len(c.Series) != 0 || c.YMax != "0" {
			t.Errorf("%s: empty %q, %d series, up to %s; want why, none, 0", c.ID, c.Empty, len(c.Series), c.YMax)
		}
	}
	// One point: a dot.
	one := h.trendsOf([]reading{at(0, 3)}, false)
	if l := chartOf(t, one, "chart-pending").Series[0].Lines; len(l) != 1 || l[0].Points != "712,68.8" || l[0].Dot == nil {
		t.Fatalf("one reading drawn %+v, want a dot at 712,68.8 (3 of 5)", l)
	}
	// No copies kept: the published chart says how to keep them.
	rs := []reading{{at: t0}, {at: t0.Add(10 * time.Second)}}
	if e := chartOf(t, h.trendsOf(rs, false), "chart-published").Empty; !strings.Contains(e, "--keep-published") {
		t.Fatalf("without copies, the published chart says %q", e)
	}
	// An estimated count: no rate.
	rs[1].published = store.Count{N: 200_000, Estimated: true}
	if e := chartOf(t, h.trendsOf(rs, false), "chart-published").Empty; !strings.Contains(e, "estimate") {
		t.Fatalf("with an estimated count, the published chart says %q", e)
	}
}
