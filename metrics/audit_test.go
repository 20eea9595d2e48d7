package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/audit"
	"github.com/courier-go/courier/broker"
	"github.com/courier-go/courier/broker/memory"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/memstore"
)

// unreadable is a broker that cannot be read back.
type unreadable struct{}

func (unreadable) ReadBack(context.Context, time.Time, time.Time, func(broker.Stored) error) (time.Time, error) {
	return time.Time{}, errors.New("connection refused")
}

// A watch's passes fill its series: a relay publishes three messages
// (copies kept), the broker loses one, holds one twice and gains a
// phantom; the watch's pass counts each finding under its name. A second
// watch whose broker cannot be read counts its failed pass. The lag is
// now − the end of the judged range, computed at the scrape.
func TestAuditWatchMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := memstore.New(memstore.Config{KeepPublished: true})
	pub := memory.NewPublisher()
	msgs := []courier.Message{
		courier.NewMessage("orders", "a", "OrderPlaced", nil),
		courier.NewMessage("orders", "b", "OrderPlaced", nil),
		courier.NewMessage("orders", "c", "OrderPlaced", nil),
	}
	testenv.Must(t, st.InTx(ctx, func(tx *memstore.Tx) error { return st.Insert(ctx, tx, msgs) }), "insert")
	r, err := relay.New(st, pub, relay.Config{PollInterval: time.Millisecond})
	testenv.Must(t, err, "relay")
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	for len(st.Pending()) > 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	stop()
	testenv.Must(t, <-done, "run")
	pub.Forget(msgs[0].ID)
	phantom := courier.NewMessage("orders", "d", "OrderPlaced", nil)
	for _, err := range pub.Publish(ctx, []courier.Message{msgs[1], phantom}) {
		testenv.Must(t, err, "publish")
	}

	col, err := metrics.New(metrics.Config{})
	testenv.Must(t, err, "collector")
	later := func() time.Time { return time.Now().Add(time.Second) } // everything published is a slack old
	w, err := audit.NewWatcher(st.Operations(), pub, audit.WatchConfig{Name: "orders", Slack: 100 * time.Millisecond,
		Remember: time.Hour, Observer: col.Audit(), Clock: later})
	testenv.Must(t, err, "watcher")
	p, err := w.Pass(ctx)
	testenv.Must(t, err, "pass")
	broken, err := audit.NewWatcher(st.Operations(), unreadable{}, audit.WatchConfig{Name: "broken", Observer: col.Audit()})
	testenv.Must(t, err, "broken watcher")
	if _, err := broken.Pass(ctx); err == nil {
		t.Fatal("a pass of a broker that cannot be read succeeded")
	}

	s := w.State()
	metrics.SetClock(col, func() time.Time { return s.To.Add(7 * time.Second) })
	want := `
# HELP courier_audit_judged_messages_total Broker messages the watch judged (each once), duplicates included: a rate near the relays' published rate says the audit keeps up.
# TYPE courier_audit_judged_messages_total counter
courier_audit_judged_messages_total{watch="broken"} 0
courier_audit_judged_messages_total{watch="orders"} 4
# HELP courier_audit_lag_seconds How far behind now the range the watch has judged ends: its slack plus up to an interval while passes succeed; growing, passes fail or the watch stopped.
# TYPE courier_audit_lag_seconds gauge
courier_audit_lag_seconds{watch="orders"} 7
# HELP courier_audit_pass_errors_total Passes that failed (the database or the broker could not be read); the next pass reads what this one did not. The log and courier status give the error.
# TYPE courier_audit_pass_errors_total counter
courier_audit_pass_errors_total{watch="broken"} 1
courier_audit_pass_errors_total{watch="orders"} 0
# HELP courier_audit_passes_total Passes the watch made, failed ones included.
# TYPE courier_audit_passes_total counter
courier_audit_passes_total{watch="broken"} 1
courier_audit_passes_total{watch="orders"} 1
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want), "courier_audit_judged_messages_total",
		"courier_audit_lag_seconds", "courier_audit_pass_errors_total", "courier_audit_passes_total"); err != nil {
		t.Error(err)
	}
	for name, n := range map[string]float64{
		"courier_audit_lost_messages_total": 1, "courier_audit_phantom_messages_total": 1,
		"courier_audit_duplicate_messages_total": 1, "courier_audit_order_breaks_total": 0,
	} {
		if got := watchValue(t, col, name, "orders"); got != n {
			t.Errorf("%s{watch=orders} = %v, want %v (pass: %+v)", name, got, n, p.Findings)
		}
		if got := watchValue(t, col, name, "broken"); got != 0 {
			t.Errorf("%s{watch=broken} = %v, want 0", name, got)
		}
	}
	if got := watchValue(t, col, "courier_audit_window_seconds", "orders"); got != s.Remembered.Seconds() || got <= 0 {
		t.Errorf("courier_audit_window_seconds = %v, want the state's Remembered %s", got, s.Remembered)
	}
	if got := watchValue(t, col, "courier_audit_last_pass_timestamp_seconds", "orders"); got != float64(s.LastPass.UnixNano())/1e9 {
		t.Errorf("courier_audit_last_pass_timestamp_seconds = %v, want %v", got, s.LastPass)
	}
	if n := testutil.CollectAndCount(col, "courier_audit_pass_duration_seconds"); n != 1 {
		t.Errorf("pass duration series: %d, want 1 (the successful pass's watch)", n)
	}
	if problems, err := testutil.CollectAndLint(col); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

// watchValue reads the counter or gauge name of watch.
func watchValue(t *testing.T, c prometheus.Collector, name, watch string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	testenv.Must(t, err, "gather")
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "watch" && l.GetValue() == watch {
					if m.GetCounter() != nil {
						return m.GetCounter().GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{watch=%q}", name, watch)
	return 0
}
