package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
)

// Figure describes one measured quantity: a row of a results table.
type Figure struct {
	// ID keys the figure in Results.
	ID string
	// Section is the -only section that measures it.
	Section string
	// Label is the row's text.
	Label string
	// Unit is printed after the label.
	Unit string
	// LowerIsBetter says how to read the ratio.
	LowerIsBetter bool
	// Digits is the number of decimals printed (-1: thousands-separated
	// integer).
	Digits int
}

// reference is the pseudo-system of rows measured once, for no system in
// particular (physical limits, the plain insert).
const reference = "reference"

// figures lists the comparison table's rows in order.
var figures = []Figure{
	{ID: "drain_keys10000", Section: "drain", Label: "Drain, 10,000 keys", Unit: "msg/s", Digits: -1},
	{ID: "drain_keys1", Section: "drain", Label: "Drain, 1 key", Unit: "msg/s", Digits: -1},
	{ID: "lat1000_p50", Section: "latency", Label: "Commit→publish p50 @ 1,000 msg/s", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "lat1000_p99", Section: "latency", Label: "Commit→publish p99 @ 1,000 msg/s", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "lat1000_p999", Section: "latency", Label: "Commit→publish p999 @ 1,000 msg/s", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "lat1000_offered", Section: "latency", Label: "Load actually offered (committed) @ 1,000 msg/s target", Unit: "msg/s", Digits: -1},
	{ID: "lat5000_p50", Section: "latency", Label: "Commit→publish p50 @ 5,000 msg/s", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "lat5000_p99", Section: "latency", Label: "Commit→publish p99 @ 5,000 msg/s", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "lat5000_p999", Section: "latency", Label: "Commit→publish p999 @ 5,000 msg/s", Unit: "ms", LowerIsBetter: true, Digits: 2},
	{ID: "lat5000_offered", Section: "latency", Label: "Load actually offered (committed) @ 5,000 msg/s target", Unit: "msg/s", Digits: -1},
	{ID: "write_tx", Section: "write", Label: "Write path: insert + outbox message, 8 writers", Unit: "tx/s", Digits: -1},
	{ID: "limit_db", Section: "limits", Label: "Database side alone (no broker): claim + mark", Unit: "msg/s", Digits: -1},
	{ID: "limit_broker", Section: "limits", Label: "Broker side alone (no database): publish + ack", Unit: "msg/s", Digits: -1},
	{ID: "cpu_relay", Section: "drain", Label: "Relay process CPU (user+sys) per 100k msgs", Unit: "s", LowerIsBetter: true, Digits: 2},
	{ID: "rss_relay", Section: "drain", Label: "Relay process peak RSS", Unit: "MiB", LowerIsBetter: true, Digits: 1},
	{ID: "cpu_pg", Section: "drain", Label: "PostgreSQL backends' CPU per 100k msgs", Unit: "s", LowerIsBetter: true, Digits: 2},
	{ID: "cpu_nats", Section: "drain", Label: "nats-server CPU per 100k msgs", Unit: "s", LowerIsBetter: true, Digits: 2},
}

// referenceFigures lists the single-figure rows (physical limits).
var referenceFigures = []Figure{
	{ID: "ref_plain_insert", Section: "write", Label: "Plain insert (one `orders` row per tx), 8 writers", Unit: "tx/s", Digits: -1},
	{ID: "ref_write_pipelined", Section: "write", Label: "Insert + Courier outbox message in one round trip (`postgres.QueueMessages`), 8 writers", Unit: "tx/s", Digits: -1},
	{ID: "ref_pg_queue", Section: "limits", Label: "PostgreSQL: minimal queue, FOR UPDATE SKIP LOCKED ×1000 + DELETE, no broker", Unit: "msg/s", Digits: -1},
	{ID: "ref_js_async", Section: "limits", Label: "JetStream: raw PublishMsgAsync, Courier-shaped messages, all acks awaited, no database", Unit: "msg/s", Digits: -1},
}

// dialectFigures are the columns of the table of Courier's relay per store
// dialect; their cells are keyed by dialect (see dialects) instead of
// system.
var dialectFigures = []Figure{
	{ID: "dialect_drain", Section: "dialects", Label: "Drain", Unit: "msg/s", Digits: -1},
	{ID: "dialect_cpu_relay", Section: "dialects", Label: "Relay process CPU per 100k msgs", Unit: "s", LowerIsBetter: true, Digits: 2},
	{ID: "dialect_cpu_db", Section: "dialects", Label: "Database server CPU per 100k msgs", Unit: "s", LowerIsBetter: true, Digits: 2},
}

// figureByID returns the figure with id.
func figureByID(id string) Figure {
	for _, f := range slices.Concat(figures, referenceFigures, dialectFigures, adversityFigures, brokerFigures, cdcFigures, cleanupFigures, scheduledFigures, consumerFigures, handoverFigures, tenantFigures, producerFigures, auditFigures) {
		if f.ID == id {
			return f
		}
	}
	panic("unknown figure " + id)
}

// Results collects every run's samples.
type Results struct {
	mu sync.Mutex
	// Samples holds figure ID → system → one value per run.
	Samples map[string]map[string][]float64 `json:"samples"`
	// Flags holds figure ID → system → remarks (e.g. "offered load not
	// held") for a cell.
	Flags map[string]map[string][]string `json:"flags"`
	// Skipped holds figure ID → system → why the cell was not measured
	// (e.g. its database was unreachable).
	Skipped map[string]map[string][]string `json:"skipped,omitempty"`
}

// NewResults returns empty Results.
func NewResults() *Results {
	return &Results{Samples: map[string]map[string][]float64{}, Flags: map[string]map[string][]string{},
		Skipped: map[string]map[string][]string{}}
}

// Add records one run's value of figure id for system.
func (r *Results) Add(id, system string, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Samples[id] == nil {
		r.Samples[id] = map[string][]float64{}
	}
	r.Samples[id][system] = append(r.Samples[id][system], v)
	logf("  %-18s %-9s %s %s", id, system, formatValue(figureByID(id), v), figureByID(id).Unit)
}

// Flag attaches a remark to a cell (printed once however often it is
// flagged).
func (r *Results) Flag(id, system, remark string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Flags[id] == nil {
		r.Flags[id] = map[string][]string{}
	}
	if !slices.Contains(r.Flags[id][system], remark) {
		r.Flags[id][system] = append(r.Flags[id][system], remark)
	}
	logf("  warning: %s / %s: %s", id, system, remark)
}

// Skip records why a run did not measure a cell (printed once however
// often it is recorded).
func (r *Results) Skip(id, system, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Skipped[id] == nil {
		r.Skipped[id] = map[string][]string{}
	}
	if !slices.Contains(r.Skipped[id][system], why) {
		r.Skipped[id][system] = append(r.Skipped[id][system], why)
	}
}

// SkippedOf returns why a cell was not measured in some runs.
func (r *Results) SkippedOf(id, system string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.Skipped[id][system])
}

// Stat summarises a cell's samples.
type Stat struct {
	// Median, Min and Max summarise the samples.
	Median, Min, Max float64
	// N is the number of samples.
	N int
}

// Spread is (max-min)/median.
func (s Stat) Spread() float64 {
	if s.Median == 0 {
		return 0
	}
	return (s.Max - s.Min) / math.Abs(s.Median)
}

// maxSpread is the spread above which a cell is marked as noisy.
const maxSpread = 0.20

// Stat returns the summary of figure id for system, and false when nothing
// was measured.
func (r *Results) Stat(id, system string) (Stat, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := slices.Clone(r.Samples[id][system])
	if len(v) == 0 {
		return Stat{}, false
	}
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return Stat{Median: med, Min: v[0], Max: v[len(v)-1], N: len(v)}, true
}

// FlagsOf returns a cell's remarks.
func (r *Results) FlagsOf(id, system string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.Flags[id][system])
}

// WriteJSON saves the raw samples.
func (r *Results) WriteJSON(path string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// formatValue prints v as figure f wants.
func formatValue(f Figure, v float64) string {
	if f.Digits < 0 || math.Abs(v) >= 1000 {
		return thousands(int64(math.Round(v)))
	}
	if f.Digits > 1 && math.Abs(v) >= 100 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.*f", f.Digits, v)
}

// thousands formats n with commas.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	out := ""
	for len(s) > 3 {
		out = "," + s[len(s)-3:] + out
		s = s[:len(s)-3]
	}
	out = s + out
	if neg {
		out = "-" + out
	}
	return out
}
