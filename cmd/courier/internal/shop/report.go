package shop

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTo writes the report as text: orders by final state with the
// cancellation reasons, throughput, latency, the faults the run absorbed,
// the deploy of ChargeRequested's version 2 and the invariants.
func (r *Report) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	r.writeOutcomes(&b)
	r.writeSpeed(&b)
	r.writeInstances(&b)
	r.writeFaults(&b)
	r.writeRollout(&b)
	r.writeInvariants(&b)
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

// writeOutcomes writes the orders by final state, then the cancellation
// reasons, the most frequent first.
func (r *Report) writeOutcomes(b *strings.Builder) {
	a := r.Audit
	fmt.Fprintf(b, "\nOrders by final state (%d placed)\n", a.Orders)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, st := range []struct{ name, key string }{
		{StateShippingReady + " (completed)", StateShippingReady},
		{StateCancelled, StateCancelled},
		{"still running", StatusOpen},
	} {
		n := a.ByState[st.key]
		if n == 0 && st.key == StatusOpen {
			continue
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t\n", st.name, n, percent(n, a.Orders))
	}
	tw.Flush()
	reasons := make([]string, 0, len(a.Reasons))
	for reason := range a.Reasons {
		reasons = append(reasons, reason)
	}
	slices.SortFunc(reasons, func(x, y string) int {
		return cmp.Or(cmp.Compare(a.Reasons[y], a.Reasons[x]), strings.Compare(x, y))
	})
	tw = tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	for _, reason := range reasons {
		fmt.Fprintf(tw, "    %s\t%d\n", reason, a.Reasons[reason])
	}
	tw.Flush()
}

// writeSpeed writes the throughput and the latencies of the orders that
// ended, if any did.
func (r *Report) writeSpeed(b *strings.Builder) {
	a := r.Audit
	ended := len(a.Latencies)
	span := a.Last.Sub(a.First)
	b.WriteString("\n")
	if ended > 0 && span > 0 {
		fmt.Fprintf(b, "Throughput  %.0f orders/s: %d orders ended in %s, from the first order placed to the last saga's end\n",
			float64(ended)/span.Seconds(), ended, round(span))
		fmt.Fprintf(b, "Latency     p50 %s, p99 %s, max %s, from POST /orders to the saga's end state\n",
			round(percentile(a.Latencies, 50)), round(percentile(a.Latencies, 99)), round(percentile(a.Latencies, 100)))
	}
}

// writeInstances writes how many instances each service ran as, how they
// shared its messages, and what each applied.
func (r *Report) writeInstances(b *strings.Builder) {
	n := r.Config.Instances
	if n == 0 || len(r.Instances) == 0 {
		return
	}
	if n == 1 {
		fmt.Fprintf(b, "Instances   each service ran as 1 instance\n")
		return
	}
	var applied []string
	for _, s := range Services {
		var counts []string
		for _, in := range r.Instances[s] {
			counts = append(counts, strconv.FormatInt(in.Metrics.Inbox.Applied, 10))
		}
		applied = append(applied, s+" "+strings.Join(counts, " + "))
	}
	const indent = "            "
	b.WriteString("Instances   ")
	b.WriteString(wrap(fmt.Sprintf("each service ran as %d instances, %s", n, r.Sharing), indent, 100-len(indent)))
	fmt.Fprintf(b, "%smessages applied by each: %s\n", indent, strings.Join(applied, ", "))
}

// wrap breaks s into lines of at most width bytes where it can, the lines
// after the first indented, each ending with a newline.
func wrap(s, indent string, width int) string {
	var b strings.Builder
	line := 0
	for i, w := range strings.Fields(s) {
		switch {
		case i == 0:
		case line+1+len(w) > width:
			b.WriteString("\n" + indent)
			line = 0
		default:
			b.WriteByte(' ')
			line++
		}
		b.WriteString(w)
		line += len(w)
	}
	b.WriteByte('\n')
	return b.String()
}

// writeFaults writes the faults injected and what absorbed them.
func (r *Report) writeFaults(b *strings.Builder) {
	a := r.Audit
	var total Metrics
	for _, m := range r.Metrics {
		total = total.add(m)
	}
	b.WriteString("\nFaults injected, and absorbed\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  POSTs sent again with the same Idempotency-Key\t%d\tanswered from the stored response: %d\n", r.Load.Retries+r.Load.Replays, r.Load.Replays)
	fmt.Fprintf(tw, "  payments declined, stock exhausted, shipments failed\t%d, %d, %d\t\n",
		prefixed(a.Reasons, "payment: "), prefixed(a.Reasons, "inventory: "), prefixed(a.Reasons, "shipping: "))
	fmt.Fprintf(tw, "  deliveries duplicated by the chaos broker\t%d\tduplicates skipped by the inboxes: %d\n", total.Chaos.Duplicated, total.Inbox.Duplicates)
	fmt.Fprintf(tw, "  deliveries reordered\t%d\t\n", total.Chaos.Reordered)
	fmt.Fprintf(tw, "  handler failures, retried by the inboxes\t%d\tparked: %d\n", total.Inbox.Retried, total.Inbox.Parked)
	if r.Ignored >= 0 {
		fmt.Fprintf(tw, "  saga events ignored (duplicate, late or out of order)\t%d\trecorded in each saga's history\n", r.Ignored)
	}
	var crashes []string
	for _, s := range Services {
		if n := r.Crashes[s]; n > 0 {
			crashes = append(crashes, fmt.Sprintf("%s ×%d", s, n))
		}
	}
	note := ""
	if len(crashes) == 0 {
		crashes = []string{"none"}
	} else if r.Config.Instances > 1 {
		note = fmt.Sprintf("each crash one instance's, of the %d each service runs", r.Config.Instances)
	}
	fmt.Fprintf(tw, "  instances crashed and restarted mid-run\t%s\t%s\n", strings.Join(crashes, ", "), note)
	tw.Flush()
}

// writeInvariants writes each invariant with its verdict, then the
// verdict of the run.
func (r *Report) writeInvariants(b *strings.Builder) {
	b.WriteString("\nInvariants\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	failed := 0
	for _, inv := range r.Invariants {
		mark := "ok  "
		if !inv.OK {
			mark = "FAIL"
			failed++
		}
		fmt.Fprintf(tw, "  %s %s\t%s\n", mark, inv.Name, inv.Detail)
	}
	tw.Flush()
	switch {
	case failed > 0:
		fmt.Fprintf(b, "\n%d of %d invariants FAILED.\n", failed, len(r.Invariants))
	default:
		fmt.Fprintf(b, "\nAll %d invariants hold.\n", len(r.Invariants))
	}
	if r.TimedOut {
		fmt.Fprintf(b, "Gave up waiting after %s: %d sagas had not ended.\n", r.Config.Timeout, r.Audit.Open())
	}
}

func percent(n, total int) string {
	if total == 0 {
		return ""
	}
	return fmt.Sprintf("%5.1f%%", 100*float64(n)/float64(total))
}

func prefixed(reasons map[string]int, prefix string) int {
	n := 0
	for r, c := range reasons {
		if strings.HasPrefix(r, prefix) {
			n += c
		}
	}
	return n
}

// round shortens a duration for reading.
func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond)
	}
	return d
}
