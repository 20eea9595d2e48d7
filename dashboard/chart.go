package dashboard

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The geometry of every chart, in the SVG's user units: a drawing of
// chartWidth by chartHeight, its plot framed by plotLeft, plotRight,
// plotTop and plotBottom, with room on the left for the y axis' labels
// and below for the x axis'.
const (
	chartWidth  = 720
	chartHeight = 184
	plotLeft    = 48
	plotRight   = 712
	plotTop     = 8
	plotBottom  = 160
)

// chart is one trend chart as the overview draws it.
type chart struct {
	ID    string // the element's id, such as chart-pending
	Title string
	Note  string // how to read it
	// Empty says why the chart has no line, when it has none.
	Empty string
	// YMax labels the top of the y axis, and data-ymax carries it.
	YMax   string
	XTicks []tick
	Series []series
}

// Frame is the plot's frame, for the template.
func (chart) Frame() frame {
	return frame{Width: chartWidth, Height: chartHeight, Left: plotLeft, Top: plotTop, Right: plotRight, Bottom: plotBottom,
		PlotWidth: plotRight - plotLeft, PlotHeight: plotBottom - plotTop}
}

// frame is the geometry constants, for the template.
type frame struct {
	Width, Height, Left, Top, Right, Bottom, PlotWidth, PlotHeight int
}

// tick is a label of the x axis: where it is, how it is anchored (start,
// middle, end) and what it says.
type tick struct {
	X      float64
	Anchor string
	Label  string
}

// series is one line of a chart and its entry in the legend.
type series struct {
	Name string
	// Other is true for the topics without a line of their own, summed.
	Other bool
	Color string
	// Latest is the newest value as the legend and the title say it,
	// such as "42 pending".
	Latest string
	Lines  []line
}

// line is one stretch of a series without unknown values: the points
// attribute of its polyline, and when it is a single point, that point
// (a polyline of one point shows nothing, so it is drawn as a dot too).
type line struct {
	Points string
	Dot    *dot
}

// dot is a point of the drawing.
type dot struct{ X, Y float64 }

// value is one value of a series: when it was read, and what it was; ok is
// false where it is unknown, which breaks the series' line.
type value struct {
	at time.Time
	v  float64
	ok bool
}

// axes map times from..to across the plot and values 0..max up it.
type axes struct {
	from, to time.Time
	max      float64
}

// x is where t is across the drawing.
func (a axes) x(t time.Time) float64 {
	span := a.to.Sub(a.from)
	if span <= 0 {
		return plotRight
	}
	return coord(plotLeft + float64(t.Sub(a.from))/float64(span)*(plotRight-plotLeft))
}

// y is where v is up the drawing (downwards from its top, as SVG counts):
// the bottom of the plot when max is 0.
func (a axes) y(v float64) float64 {
	if a.max <= 0 {
		return plotBottom
	}
	return coord(plotBottom - v/a.max*(plotBottom-plotTop))
}

// coord rounds a coordinate to hundredths, which is finer than any screen
// shows and keeps the page short.
func coord(v float64) float64 { return math.Round(v*100) / 100 }

// lines maps a series' values to the lines that draw it: one per stretch
// of known values.
func (a axes) lines(vals []value) []line {
	var out []line
	var pts []string
	var last dot
	flush := func() {
		switch len(pts) {
		case 0:
			return
		case 1:
			d := last
			out = append(out, line{Points: pts[0], Dot: &d})
		default:
			out = append(out, line{Points: strings.Join(pts, " ")})
		}
		pts = nil
	}
	for _, v := range vals {
		if !v.ok {
			flush()
			continue
		}
		last = dot{X: a.x(v.at), Y: a.y(v.v)}
		pts = append(pts, num(last.X)+","+num(last.Y))
	}
	flush()
	return out
}

// num writes a number as short as it reads back.
func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// niceMax is the y axis' top for values up to v: the least of 1, 2 and 5
// times a power of ten that is at least v; 0 for 0.
func niceMax(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}

// ticks labels the x axis of a chart reaching back over history: four
// equal parts, "−60 min" … "now".
func ticks(history time.Duration) []tick {
	const parts = 4
	out := make([]tick, parts+1)
	for i := range out {
		back := history * time.Duration(parts-i) / parts
		out[i] = tick{X: coord(plotLeft + float64(i)/parts*(plotRight-plotLeft)), Anchor: "middle", Label: "−" + minutes(back)}
	}
	out[0].Anchor, out[parts].Anchor, out[parts].Label = "start", "end", "now"
	return out
}

// minutes shows a span of the x axis: "15 min", "7.5 min", or "30 s"
// under two minutes.
func minutes(d time.Duration) string {
	if d < 2*time.Minute {
		return num(math.Round(d.Seconds()*100)/100) + " s"
	}
	return num(math.Round(d.Minutes()*100)/100) + " min"
}

// palette colours the series, in turn; otherColor is the aggregate's.
var palette = []string{"#2856c7", "#d9480f", "#2b8a3e", "#ae3ec9", "#e8590c", "#1098ad", "#c2255c", "#5c940d", "#7048e8", "#a07800"}

const otherColor = "#868e96"

// plotted is a chart's series before they are drawn: values and how to
// say the newest.
type plotted struct {
	name  string
	other bool
	vals  []value
	say   func(v float64) string
}

// draw returns the chart of the series over the last history before now:
// the y axis reaches the largest value, rounded up (niceMax).
func draw(c chart, now time.Time, history time.Duration, ps []plotted) chart {
	top := 0.0
	for _, p := range ps {
		for _, v := range p.vals {
			if v.ok {
				top = max(top, v.v)
			}
		}
	}
	a := axes{from: now.Add(-history), to: now, max: niceMax(top)}
	c.YMax, c.XTicks = num(a.max), ticks(history)
	for i, p := range ps {
		s := series{Name: p.name, Other: p.other, Color: palette[i%len(palette)], Latest: "unknown now", Lines: a.lines(p.vals)}
		if p.other {
			s.Color = otherColor
		}
		if n := len(p.vals); n > 0 && p.vals[n-1].ok {
			s.Latest = p.say(p.vals[n-1].v)
		}
		c.Series = append(c.Series, s)
	}
	return c
}

// trends are the overview's charts and what the page says of them.
type trends struct {
	Charts []chart
	// Readings counts the readings drawn; Span is how far back the
	// oldest is, "" when there is one.
	Readings int
	Span     string
	// Every and History are Config.SampleEvery and Config.History.
	Every, History string
	// Refreshing is true when the page reloads itself every Refresh
	// seconds.
	Refreshing bool
	Refresh    int
}

// trendsOf draws the charts of rs, the readings held, oldest first (at
// least one: the overview's own).
func (h *Handler) trendsOf(rs []reading, refreshing bool) trends {
	t := trends{Readings: len(rs), Every: ago(h.cfg.SampleEvery), History: ago(h.cfg.History), Refreshing: refreshing, Refresh: refreshSeconds(h.cfg.SampleEvery)}
	if len(rs) == 0 {
		return t
	}
	now, hist := rs[len(rs)-1].at, h.cfg.History
	if d := now.Sub(rs[0].at); d > 0 {
		t.Span = ago(d)
	}
	t.Charts = []chart{pendingChart(rs, now, hist), oldestChart(rs, now, hist), publishedChart(rs, now, hist), failuresChart(rs, now, hist)}
	return t
}

// refreshSeconds is how often a page that refreshes itself reloads: every
// SampleEvery, in whole seconds, at least 1.
func refreshSeconds(every time.Duration) int {
	return max(1, int((every+time.Second-1)/time.Second))
}

// drawnTopics returns the topics drawn one by one: those pending in any
// reading, the most pending at their peak first, at most trendTopics; and
// whether the others need a line of their own, summed.
func drawnTopics(rs []reading) (names []string, rest bool) {
	peak := map[string]int64{}
	for _, r := range rs {
		for _, t := range r.topics {
			peak[t.topic] = max(peak[t.topic], t.pending)
		}
		rest = rest || r.capped()
	}
	for n := range peak {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(peak[b], peak[a]), cmp.Compare(a, b)) })
	if len(names) > trendTopics {
		return names[:trendTopics], true
	}
	return names, rest
}

// topicSeries returns the series of a per-topic chart: one per topic
// drawn, of what of reads from a topic's reading, and the others summed
// by sum.
func topicSeries(rs []reading, of func(topicReading) float64, sum func(a, b float64) float64, say func(float64) string) []plotted {
	names, rest := drawnTopics(rs)
	var ps []plotted
	for _, n := range names {
		p := plotted{name: n, say: say}
		for _, r := range rs {
			t, ok := r.topic(n)
			p.vals = append(p.vals, value{at: r.at, v: of(t), ok: ok})
		}
		ps = append(ps, p)
	}
	if !rest {
		return ps
	}
	drawn := map[string]bool{}
	for _, n := range names {
		drawn[n] = true
	}
	p := plotted{name: "other topics", other: true, say: say}
	for _, r := range rs {
		v := of(r.other)
		for _, t := range r.topics {
			if !drawn[t.topic] {
				v = sum(v, of(t))
			}
		}
		p.vals = append(p.vals, value{at: r.at, v: v, ok: true})
	}
	return append(ps, p)
}

func pendingChart(rs []reading, now time.Time, hist time.Duration) chart {
	c := chart{ID: "chart-pending", Title: "Pending per topic",
		Note: fmt.Sprintf("Rows pending in the outbox, per topic: the %d topics with the most at their peak have a line each, the others are summed. A gap: the topic was not among the %d with the most of its reading.", trendTopics, trendTopics)}
	ps := topicSeries(rs, func(t topicReading) float64 { return float64(t.pending) }, func(a, b float64) float64 { return a + b },
		func(v float64) string { return num(v) + " pending" })
	if len(ps) == 0 {
		c.Empty = "Nothing was pending in the outbox in these readings."
	}
	return draw(c, now, hist, ps)
}

func oldestChart(rs []reading, now time.Time, hist time.Duration) chart {
	c := chart{ID: "chart-oldest", Title: "Oldest pending message's wait per topic, in seconds",
		Note: "How long the oldest pending row of each topic had waited: a line that keeps rising is a topic no relay publishes."}
	ps := topicSeries(rs, func(t topicReading) float64 { return t.oldest.Seconds() }, math.Max,
		func(v float64) string {
			if v <= 0 {
				return "nothing pending"
			}
			return "oldest waits " + ago(time.Duration(v*float64(time.Second)))
		})
	if len(ps) == 0 {
		c.Empty = "Nothing was pending in the outbox in these readings."
	}
	return draw(c, now, hist, ps)
}

// rate returns, for each reading after the first, the change of what it
// counts since the reading before, per unit of time; ok is false where
// known says the change is unknown.
func rate(rs []reading, per time.Duration, count func(reading) float64, known func(prev, r reading) bool) []value {
	var out []value
	for i := 1; i < len(rs); i++ {
		prev, r := rs[i-1], rs[i]
		dt := r.at.Sub(prev.at)
		v := value{at: r.at, ok: dt > 0 && known(prev, r)}
		if v.ok {
			v.v = (count(r) - count(prev)) / (float64(dt) / float64(per))
		}
		out = append(out, v)
	}
	return out
}

// oneReading is why a chart of rates is empty with one reading.
const oneReading = "One reading so far: a rate takes two."

func publishedChart(rs []reading, now time.Time, hist time.Duration) chart {
	c := chart{ID: "chart-published", Title: "Published per second",
		Note: "From the change of the count of published messages' copies between readings. A drop (cleanup trimmed copies) is no rate: the line has a gap there."}
	kept := slices.ContainsFunc(rs, func(r reading) bool { return r.published.N > 0 })
	switch {
	case len(rs) < 2:
		c.Empty = oneReading
	case !kept:
		c.Empty = "No copies of published messages are kept, so what was published cannot be counted: relays keep them with courier relay --keep-published (RelayConfig.KeepPublished)."
	case rs[len(rs)-1].published.Estimated:
		c.Empty = "More copies of published messages are kept than Status counts exactly: their count is the database's estimate, too rough for a rate."
	}
	if c.Empty != "" {
		return draw(c, now, hist, nil)
	}
	vals := rate(rs, time.Second, func(r reading) float64 { return float64(r.published.N) }, func(prev, r reading) bool {
		return !prev.published.Estimated && !r.published.Estimated && r.published.N >= prev.published.N
	})
	return draw(c, now, hist, []plotted{{name: "published", vals: vals, say: func(v float64) string { return perUnit(v, "s") }}})
}

func failuresChart(rs []reading, now time.Time, hist time.Duration) chart {
	c := chart{ID: "chart-failures", Title: "New dead letters and parked messages per minute",
		Note: "The net increase of the relays' dead letters and the consumers' parked messages between readings, per minute, never below 0: a replay or a discard in the same interval hides as many new ones."}
	if len(rs) < 2 {
		c.Empty = oneReading
		return draw(c, now, hist, nil)
	}
	always := func(reading, reading) bool { return true }
	floor := func(vs []value) []value {
		for i := range vs {
			vs[i].v = max(0, vs[i].v)
		}
		return vs
	}
	say := func(v float64) string { return perUnit(v, "min") }
	return draw(c, now, hist, []plotted{
		{name: "dead letters", vals: floor(rate(rs, time.Minute, func(r reading) float64 { return float64(r.dead) }, always)), say: say},
		{name: "parked", vals: floor(rate(rs, time.Minute, func(r reading) float64 { return float64(r.parked) }, always)), say: say},
	})
}

// perUnit says a rate: "1250/s", "12.3/s", "0.25/min".
func perUnit(v float64, unit string) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64) + "/" + unit
	}
	return strconv.FormatFloat(v, 'g', 3, 64) + "/" + unit
}
