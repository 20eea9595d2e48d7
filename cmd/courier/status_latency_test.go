package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/latency"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/dburl"
)

// recordLatency records, in the database at url, consumer's sample of
// topic: n latencies of each of ds.
func recordLatency(t *testing.T, url, consumer, topic string, n int, ds ...time.Duration) {
	t.Helper()
	ctx := context.Background()
	d, err := dburl.Open(ctx, url, dburl.Options{})
	testenv.Must(t, err, "open "+url)
	defer d.Close()
	var h latency.Histogram
	for _, l := range ds {
		for range n {
			h.Observe(l)
		}
	}
	testenv.Must(t, d.Delivery().RecordLatency(ctx, []store.LatencySample{h.Sample(consumer, topic, 10*time.Second)}), "record latency")
}

// backdateLatency is the statement, in the dialect of name, that moves
// every latency sample of a topic two hours back.
func backdateLatency(name string) string {
	switch name {
	case "postgres":
		return `UPDATE courier_latency SET recorded_at = recorded_at - interval '2 hours' WHERE topic = $1`
	case "mysql":
		return `UPDATE courier_latency SET recorded_at = recorded_at - INTERVAL 2 HOUR WHERE topic = ?`
	}
	return `UPDATE courier_latency SET recorded_at = recorded_at - 7200000000 WHERE topic = ?`
}

// Status has a latency section, per topic and consumer over
// --latency-window, in its table and its JSON, on every dialect:
// messages, p50, p99 and the skewed count, from the samples consumers
// recorded (older ones left out); --fail-if-latency-p99-over fails on a
// p99 above it, naming the topic, the consumer and the figure, and passes
// below it.
func TestStatusLatency(t *testing.T) {
	for name, open := range dlqDatabases(t) {
		t.Run(name, func(t *testing.T) {
			d := open(t)
			db := []string{"--database-url", d.url}
			code, st, errOut := statusJSONOf(t, append(db, "--fail-if-latency-p99-over", "1ns")...)
			if code != 0 || st.Latency == nil || len(st.Latency.Topics) != 0 || st.Latency.WindowS != 300 || st.Failed != nil {
				t.Fatalf("status of a database without latency: exit %d, %+v, %s", code, st.Latency, errOut)
			}
			code, out, errOut := runCLI(t, append([]string{"status"}, db...)...)
			if code != 0 || !strings.Contains(out, "LATENCY (last 5m0s)") || !strings.Contains(out, "no consumer records its latency") {
				t.Fatalf("status table without latency: exit %d\n%s%s", code, out, errOut)
			}

			// billing applied 100 orders in 20ms and 5 in 3s (p99: 3s);
			// shipping 10 payments in 50ms, and 2 whose clock was behind.
			recordLatency(t, d.url, "billing", "orders", 100, 20*time.Millisecond)
			recordLatency(t, d.url, "billing", "orders", 5, 3*time.Second)
			recordLatency(t, d.url, "shipping", "payments", 5, 50*time.Millisecond)
			recordLatency(t, d.url, "shipping", "payments", 5, 50*time.Millisecond)
			recordLatency(t, d.url, "shipping", "payments", 2, -time.Second)
			// Two hours ago, an hour late: out of the window.
			recordLatency(t, d.url, "billing", "audit", 1, time.Hour)
			_, err := d.db.Exec(backdateLatency(name), "audit")
			testenv.Must(t, err, "backdate")

			code, st, errOut = statusJSONOf(t, db...)
			if code != 0 || st.Latency == nil || len(st.Latency.Topics) != 2 {
				t.Fatalf("status: exit %d, %+v, %s; want orders and payments", code, st.Latency, errOut)
			}
			o, p := st.Latency.Topics[0], st.Latency.Topics[1]
			if o.Topic != "orders" || o.Consumer != "billing" || o.Messages != 105 || o.Skewed != 0 ||
				o.P50S < 0.0178 || o.P50S > 0.0225 || o.P99S < 2.67 || o.P99S > 3.37 {
				t.Errorf("orders at billing: %+v, want 105 messages, p50 about 20ms, p99 about 3s", o)
			}
			if p.Topic != "payments" || p.Consumer != "shipping" || p.Messages != 12 || p.Skewed != 2 || p.P99S < 0.044 || p.P99S > 0.057 {
				t.Errorf("payments at shipping: %+v, want 12 messages, 2 skewed, p99 about 50ms", p)
			}
			if w := time.Duration(st.Latency.WindowS * float64(time.Second)); w != 5*time.Minute || st.Now.Sub(st.Latency.Since) != w {
				t.Errorf("window %s from %s (now %s), want 5m", w, st.Latency.Since, st.Now)
			}
			code, out, errOut = runCLI(t, append([]string{"status"}, db...)...)
			if code != 0 {
				t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
			}
			rows := map[string][]string{}
			for _, line := range strings.Split(out[strings.Index(out, "LATENCY"):], "\n") {
				if f := strings.Fields(line); len(f) > 0 {
					rows[f[0]] = f
				}
			}
			if f := rows["orders"]; len(f) != 6 || f[1] != "billing" || f[2] != "105" || !strings.HasSuffix(f[3], "ms") || !strings.HasSuffix(f[4], "s") || f[5] != "0" {
				t.Errorf("status' orders latency line %q, want billing 105 p50 p99 0", f)
			}
			if f := rows["payments"]; len(f) != 6 || f[1] != "shipping" || f[2] != "12" || f[5] != "2" {
				t.Errorf("status' payments latency line %q, want shipping 12 … 2 skewed", f)
			}
			if _, ok := rows["audit"]; ok {
				t.Errorf("status shows audit's sample of two hours ago:\n%s", out)
			}
			// A window of three hours takes it in.
			if code, st, _ = statusJSONOf(t, append(db, "--latency-window", "3h")...); code != 0 || len(st.Latency.Topics) != 3 || st.Latency.Topics[0].Topic != "audit" {
				t.Errorf("status --latency-window 3h: exit %d, %+v; want audit too", code, st.Latency)
			}

			// Both sides of the limit: orders' p99 is about 3s.
			code, st, errOut = statusJSONOf(t, append(db, "--fail-if-latency-p99-over", "2s")...)
			if code != 1 || len(st.Failed) != 1 || !strings.HasPrefix(st.Failed[0], `topic "orders" at consumer "billing": p99 latency 3.`) ||
				!strings.Contains(st.Failed[0], "over the last 5m0s (105 messages), more than --fail-if-latency-p99-over 2s") || !strings.Contains(errOut, st.Failed[0]) {
				t.Fatalf("status --fail-if-latency-p99-over 2s: exit %d, failed %q, stderr %s", code, st.Failed, errOut)
			}
			if code, st, errOut = statusJSONOf(t, append(db, "--fail-if-latency-p99-over", "4s")...); code != 0 || st.Failed != nil {
				t.Fatalf("status --fail-if-latency-p99-over 4s: exit %d, failed %q, %s", code, st.Failed, errOut)
			}
			t.Setenv("COURIER_FAIL_IF_LATENCY_P99_OVER", "40ms")
			if code, st, errOut = statusJSONOf(t, db...); code != 1 || len(st.Failed) != 2 || !strings.Contains(errOut, `topic "payments" at consumer "shipping"`) {
				t.Fatalf("status with COURIER_FAIL_IF_LATENCY_P99_OVER=40ms: exit %d, failed %q, %s", code, st.Failed, errOut)
			}
		})
	}
}

// --latency-window and --fail-if-latency-p99-over take positive
// durations, said in one line.
func TestStatusLatencyFlags(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"--latency-window 0s", "--latency-window is 0s: use a positive duration such as 5m"},
		{"--fail-if-latency-p99-over=-1s", "--fail-if-latency-p99-over is -1s: use a positive duration such as 2s"},
	} {
		code, _, errOut := runCLI(t, append([]string{"status", "--database-url", "sqlite://" + t.TempDir() + "/x.db"}, strings.Fields(c.args)...)...)
		if code != 1 || !strings.Contains(errOut, c.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("status %s: exit %d, stderr %q; want one line with %q", c.args, code, errOut, c.want)
		}
	}
}
