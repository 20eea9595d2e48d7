package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/metrics"
	"github.com/courier-go/courier/store"
)

// FromStatus exports one series per slot and gauge; the lag in seconds
// only where PostgreSQL knows it.
func TestSlotGauges(t *testing.T) {
	secs := 0.25
	src := metrics.FromStatus(fixedStatus{Slots: []store.ReplicationSlot{
		{Name: "courier_outbox", Plugin: "pgoutput", Active: true, ActivePID: 42, WALStatus: "reserved", LagBytes: 2048, RetainedBytes: 4096, LagSeconds: &secs},
		{Name: "stopped", Plugin: "pgoutput", WALStatus: "extended", LagBytes: 1 << 30, RetainedBytes: 1 << 30},
	}})
	col, err := metrics.New(metrics.Config{Slots: src})
	testenv.Must(t, err, "new")
	want := `
# HELP courier_cdc_slot_active 1 while a reader (a CDC relay) is connected to the replication slot, 0 otherwise.
# TYPE courier_cdc_slot_active gauge
courier_cdc_slot_active{slot="courier_outbox"} 1
courier_cdc_slot_active{slot="stopped"} 0
# HELP courier_cdc_slot_lag_bytes Write-ahead log written that the replication slot's reader (a CDC relay) has not confirmed, in bytes.
# TYPE courier_cdc_slot_lag_bytes gauge
courier_cdc_slot_lag_bytes{slot="courier_outbox"} 2048
courier_cdc_slot_lag_bytes{slot="stopped"} 1.073741824e+09
# HELP courier_cdc_slot_lag_seconds How long the replication slot's reader took to confirm what it was last sent (pg_stat_replication's flush_lag); absent when PostgreSQL does not know it (no reader, or caught up).
# TYPE courier_cdc_slot_lag_seconds gauge
courier_cdc_slot_lag_seconds{slot="courier_outbox"} 0.25
# HELP courier_cdc_slot_retained_bytes Write-ahead log PostgreSQL keeps for the replication slot, in bytes: what a stopped CDC relay costs in disk.
# TYPE courier_cdc_slot_retained_bytes gauge
courier_cdc_slot_retained_bytes{slot="courier_outbox"} 4096
courier_cdc_slot_retained_bytes{slot="stopped"} 1.073741824e+09
`
	testenv.Must(t, testutil.CollectAndCompare(col, strings.NewReader(want),
		"courier_cdc_slot_active", "courier_cdc_slot_lag_bytes", "courier_cdc_slot_lag_seconds", "courier_cdc_slot_retained_bytes"), "slot gauges")
}

// CDC exports a CDC relay's counters as it reads them at each scrape.
func TestCDCCounters(t *testing.T) {
	s := metrics.CDCStats{Published: 7, Retried: 2, DeadLettered: 1, Swept: 3, Reading: true}
	col := metrics.CDC(func() metrics.CDCStats { return s })
	want := func(published, reading string) string {
		return `
# HELP courier_cdc_dead_lettered_messages_total Messages the CDC relay made dead letters, after their last attempt or at once when the broker rejected them for good.
# TYPE courier_cdc_dead_lettered_messages_total counter
courier_cdc_dead_lettered_messages_total 1
# HELP courier_cdc_published_messages_total Messages the broker acknowledged that the CDC relay read from the log or the table.
# TYPE courier_cdc_published_messages_total counter
courier_cdc_published_messages_total ` + published + `
# HELP courier_cdc_reading 1 while the CDC relay reads its replication slot; 0 while it waits as a standby behind another reader, or reconnects.
# TYPE courier_cdc_reading gauge
courier_cdc_reading ` + reading + `
# HELP courier_cdc_retried_messages_total Failed publishes the CDC relay will try again.
# TYPE courier_cdc_retried_messages_total counter
courier_cdc_retried_messages_total 2
# HELP courier_cdc_swept_messages_total Rows the CDC relay published from the table when it started (written before its slot existed, or left by a relay that died), not from the log.
# TYPE courier_cdc_swept_messages_total counter
courier_cdc_swept_messages_total 3
`
	}
	testenv.Must(t, testutil.CollectAndCompare(col, strings.NewReader(want("7", "1"))), "reading relay")
	s.Published, s.Reading = 9, false
	testenv.Must(t, testutil.CollectAndCompare(col, strings.NewReader(want("9", "0"))), "standby after more messages")
}
