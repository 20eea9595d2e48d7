package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/courier-go/courier/internal/escape"
	"github.com/courier-go/courier/latency"
	"github.com/courier-go/courier/store"
)

// latencyFlags are status' flags of the consumers' latency, commit to
// applied (package latency, table courier_latency).
type latencyFlags struct {
	LatencyWindow    time.Duration `name:"latency-window" help:"How far back the latency section reads the consumers' latency samples (commit to applied, per topic and consumer)." default:"5m" env:"COURIER_LATENCY_WINDOW"`
	FailIfLatencyP99 time.Duration `name:"fail-if-latency-p99-over" help:"Exit 1 when a topic's 99th percentile latency at a consumer, commit to applied over --latency-window, is above this (e.g. 2s), naming the topic, the consumer and the figure." env:"COURIER_FAIL_IF_LATENCY_P99_OVER"`
}

// maxLatencySamples bounds the samples status reads: ten pages of
// store.MaxLatencyRows, a window of 5 minutes of 330 consumer and topic
// pairs flushing every 10 seconds.
const maxLatencySamples = 10 * store.MaxLatencyRows

func (f latencyFlags) validateLatency() error {
	if f.LatencyWindow <= 0 {
		return fmt.Errorf("--latency-window is %s: use a positive duration such as 5m", f.LatencyWindow)
	}
	if f.FailIfLatencyP99 < 0 {
		return fmt.Errorf("--fail-if-latency-p99-over is %s: use a positive duration such as 2s, or leave it out", f.FailIfLatencyP99)
	}
	return nil
}

// latencySection is status' latency section, in its JSON under "latency".
type latencySection struct {
	// WindowS is --latency-window, in seconds; Since its start (the
	// store's clock).
	WindowS float64   `json:"window_seconds"`
	Since   time.Time `json:"since"`
	// Partial is true when the window held more samples than status reads
	// (the newest are left out).
	Partial bool `json:"partial,omitempty"`
	// Topics are the figures per topic and consumer, by topic then
	// consumer.
	Topics []latencyRow `json:"topics"`
	// Error is why the samples could not be read or summed, if so.
	Error string `json:"error,omitempty"`
}

// latencyRow is one topic's latency at one consumer over the window.
type latencyRow struct {
	Topic    string  `json:"topic"`
	Consumer string  `json:"consumer"`
	Messages int64   `json:"messages"`
	P50S     float64 `json:"p50_seconds"`
	P99S     float64 `json:"p99_seconds"`
	Skewed   int64   `json:"skewed"`
	sum      latency.Summary
}

// latency reads the samples recorded in the window before now (the
// store's clock) and sums them per topic and consumer. A failure to read
// them is the section's Error, not status': the rest of the status stands.
func (f latencyFlags) latency(ctx context.Context, d store.Delivery, now time.Time) latencySection {
	since := now.Add(-f.LatencyWindow)
	sec := latencySection{WindowS: f.LatencyWindow.Seconds(), Since: since, Topics: []latencyRow{}}
	samples, full, err := latency.Read(ctx, d, since, maxLatencySamples)
	sec.Partial = full
	if err != nil {
		sec.Error = err.Error()
		return sec
	}
	sums, err := latency.Summarize(samples, since)
	if err != nil {
		sec.Error = err.Error()
	}
	for _, s := range sums {
		sec.Topics = append(sec.Topics, latencyRow{Topic: s.Topic, Consumer: s.Consumer, Messages: s.Messages,
			P50S: s.P50.Seconds(), P99S: s.P99.Seconds(), Skewed: s.Skewed, sum: s})
	}
	return sec
}

// latencyChecks returns a message for each topic and consumer whose p99
// is above --fail-if-latency-p99-over, and one when the samples could not
// be read while the check was asked for.
func (f latencyFlags) latencyChecks(sec latencySection) []string {
	if f.FailIfLatencyP99 <= 0 {
		return nil
	}
	var failed []string
	if sec.Error != "" {
		failed = append(failed, "the latency could not be read for --fail-if-latency-p99-over: "+sec.Error)
	}
	for _, r := range sec.Topics {
		if r.sum.P99 > f.FailIfLatencyP99 {
			failed = append(failed, fmt.Sprintf("topic %q at consumer %q: p99 latency %s over the last %s (%d messages), more than --fail-if-latency-p99-over %s: is the consumer keeping up, or a relay late? (docs/operations.md, End-to-end latency)",
				escape.Line(r.Topic), escape.Line(r.Consumer), latencyFigure(r.sum.P99), f.LatencyWindow, r.Messages, f.FailIfLatencyP99))
		}
	}
	return failed
}

// latencyFigure says a quantile: to the millisecond under ten seconds, to
// the tenth of a second above, and "over" the highest bound, which is all
// the histogram knows of what lies above it.
func latencyFigure(d time.Duration) string {
	b := latency.Bounds()
	if top := time.Duration(b[len(b)-1] * float64(time.Second)); d >= top {
		return "over " + top.Round(time.Second).String()
	}
	if d < 10*time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// printLatency writes the latency section as a table after the others.
// Names read from the database are escaped for the terminal.
func printLatency(w io.Writer, sec latencySection) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintf(tw, "LATENCY (last %s)\tconsumer\tmessages\tp50\tp99\tskewed\t\n", time.Duration(sec.WindowS*float64(time.Second)))
	for _, r := range sec.Topics {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t\n", escape.Line(r.Topic), escape.Line(r.Consumer), r.Messages, latencyFigure(r.sum.P50), latencyFigure(r.sum.P99), r.Skewed)
	}
	switch {
	case sec.Error != "":
		fmt.Fprintln(tw, "(could not be read: "+escape.Line(sec.Error)+")")
	case len(sec.Topics) == 0:
		fmt.Fprintln(tw, "(no message applied in the window, or no consumer records its latency: latency.Recorder, courier shop --latency-every)")
	case sec.Partial:
		fmt.Fprintln(tw, "(the window holds more samples than status reads: the newest are left out; shorten --latency-window)")
	}
}
