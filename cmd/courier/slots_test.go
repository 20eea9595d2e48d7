package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// newSlot makes a logical replication slot with a name of its own, with its
// publication, on pg's database, and drops both when the test ends (after
// the relays the test started later have stopped).
func newSlot(t *testing.T, pg *testenv.PG, create bool) string {
	t.Helper()
	ctx := context.Background()
	slot := strings.ToLower(testenv.Name("slot_"))
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := pg.Admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
			if err == nil || time.Now().After(deadline) {
				if err != nil {
					t.Errorf("drop slot %s: %v", slot, err)
				}
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		_, _ = pg.Admin.Exec(ctx, "DROP PUBLICATION IF EXISTS "+slot)
	})
	if create {
		testenv.Must(t, postgres.NewDriver(pg.Pool).CDC().Setup(ctx, slot), "publication")
		_, err := pg.Pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
		testenv.Must(t, err, "create slot")
	}
	return slot
}

// writeMessages commits n messages, one transaction each.
func writeMessages(t *testing.T, pg *testenv.PG, n int) {
	t.Helper()
	ctx := context.Background()
	d := postgres.NewDriver(pg.Pool)
	w := outbox.New(d.Inserter(), outbox.Config{})
	for i := range n {
		testenv.Must(t, d.InTx(ctx, func(tx pgx.Tx) error {
			return w.Write(ctx, tx, courier.NewMessage("orders", fmt.Sprint("k", i%4), "OrderPlaced", []byte(fmt.Sprint(i))))
		}), "write")
	}
}

// courier status shows a slot nobody reads, with its lag, in text and
// JSON; --fail-if-slot-lag exits 1 over the limit, naming the slot, and 0
// under it; --fail-if-slot-inactive exits 1 naming it.
func TestStatusSlotChecks(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	slot := newSlot(t, pg, true)
	writeMessages(t, pg, 30)

	code, st, errOut := statusJSONOf(t, "--database-url", pg.URL)
	var got *store.ReplicationSlot
	for i, s := range st.Slots {
		if s.Name == slot {
			got = &st.Slots[i]
		}
	}
	if code != 0 || got == nil {
		t.Fatalf("status --json: exit %d, slots %+v, stderr %s", code, st.Slots, errOut)
	}
	if got.Active || got.LagBytes < 30*100 || got.RetainedBytes < got.LagBytes || got.LagSeconds != nil || got.Plugin != "pgoutput" {
		t.Fatalf("unread slot after 30 transactions: %+v", *got)
	}
	t.Logf("slot %s: lag %d bytes (%s), retained %d", slot, got.LagBytes, byteSize(got.LagBytes), got.RetainedBytes)

	code, out, errOut := runCLI(t, "status", "--database-url", pg.URL)
	if code != 0 || !strings.Contains(out, "REPLICATION SLOTS") || !strings.Contains(out, slot) {
		t.Fatalf("status: exit %d, stderr %s, output:\n%s", code, errOut, out)
	}
	t.Logf("status:\n%s", out)

	code, st, errOut = statusJSONOf(t, "--database-url", pg.URL, "--fail-if-slot-lag", "1kB")
	if code != 1 || !strings.Contains(errOut, "replication slot "+slot+" lags") || !strings.Contains(errOut, "--fail-if-slot-lag 1 kB") || len(st.Failed) == 0 {
		t.Fatalf("status --fail-if-slot-lag 1kB: exit %d, failed %q, stderr %s", code, st.Failed, errOut)
	}
	code, st, errOut = statusJSONOf(t, "--database-url", pg.URL, "--fail-if-slot-lag", "1TB")
	if code != 0 || st.Failed != nil {
		t.Fatalf("status --fail-if-slot-lag 1TB: exit %d, failed %q, stderr %s", code, st.Failed, errOut)
	}
	code, _, errOut = runCLI(t, "status", "--database-url", pg.URL, "--fail-if-slot-inactive")
	if code != 1 || !strings.Contains(errOut, "replication slot "+slot+" has no reader") {
		t.Fatalf("status --fail-if-slot-inactive: exit %d, stderr %s", code, errOut)
	}
	for _, bad := range []string{"12XB", "-1GB", "MB", "1e9"} {
		code, _, errOut = runCLI(t, "status", "--database-url", pg.URL, "--fail-if-slot-lag="+bad)
		if code == 0 || !strings.Contains(errOut, "--fail-if-slot-lag") || !strings.Contains(errOut, "such as 512MB or 1GB") {
			t.Fatalf("status --fail-if-slot-lag %s: exit %d, stderr %s", bad, code, errOut)
		}
	}
}

// metricValue returns the value of the series named series (with its
// labels, as /metrics writes them) in a /metrics body.
func metricValue(body, series string) (float64, bool) {
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// courier relay --mode cdc --metrics-addr serves the slot's gauges and the
// relay's counters on /metrics, and /readyz says that it reads the slot; a
// second relay on the slot is ready as a standby.
func TestRelayCDCMetrics(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	natsURL := testenv.NATSOrEmbedded(t)
	nc := testenv.Connect(t, natsURL)
	stream := testenv.Name("CDCM")
	mapping := couriernats.Config{SubjectPrefix: strings.ToLower(stream) + "."}
	testenv.Must(t, couriernats.EnsureStream(context.Background(), nc, mapping, couriernats.StreamConfig{Name: stream}), "stream")
	slot := newSlot(t, pg, false)
	args := []string{"--mode", "cdc", "--slot", slot, "--publication", slot, "--database-url", pg.URL,
		"--broker-url", natsURL, "--stream", stream, "--subject-prefix", mapping.SubjectPrefix, "--stats-interval", "100ms"}

	r := serveRelay(t, 0, args...)
	const n = 40
	writeMessages(t, pg, n)
	var body string
	testenv.Eventually(t, 30*time.Second, func() bool {
		_, body = r.get(t, "/metrics")
		published, _ := metricValue(body, "courier_cdc_published_messages_total")
		active, _ := metricValue(body, `courier_cdc_slot_active{slot="`+slot+`"}`)
		reading, _ := metricValue(body, "courier_cdc_reading")
		return published >= n && active == 1 && reading == 1
	}, "/metrics shows %d messages published and the slot active:\n%s\n%s", n, testenv.Lazy(func() any { return body }), testenv.Lazy(func() any { return r.Logs() }))
	for _, series := range []string{`courier_cdc_slot_lag_bytes{slot="` + slot + `"}`, `courier_cdc_slot_retained_bytes{slot="` + slot + `"}`} {
		if _, ok := metricValue(body, series); !ok {
			t.Fatalf("/metrics has no %s:\n%s", series, body)
		}
	}
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, "courier_cdc_") {
			t.Log(strings.TrimSpace(line))
		}
	}
	code, ready := r.get(t, "/readyz")
	if code != 200 || !strings.Contains(ready, `"cdc": "reading slot `+slot) {
		t.Fatalf("/readyz of the reader: %d %s", code, ready)
	}

	standby := serveRelay(t, 0, args...)
	testenv.Eventually(t, 30*time.Second, func() bool {
		code, ready = standby.get(t, "/readyz")
		return code == 200 && strings.Contains(ready, `"cdc": "standby: another relay reads slot `+slot)
	}, "/readyz of the standby says so: %s", testenv.Lazy(func() any { return fmt.Sprint(code, " ", ready, "\n", standby.Logs()) }))
	_, body = standby.get(t, "/metrics")
	if v, ok := metricValue(body, "courier_cdc_reading"); !ok || v != 0 {
		t.Fatalf("the standby's courier_cdc_reading: %v %v", v, ok)
	}
}

// A logical slot on a server that streams to a standby is not kept there
// before PostgreSQL 17's failover slots: status says what a promotion
// would lose (table-less messages), in text and JSON, and says nothing
// once no standby streams.
func TestStatusWarnsOfSlotsAFailoverLeaves(t *testing.T) {
	primary := testenv.StartPostgres(t)
	standby := testenv.StartStandby(t, primary)
	url := primary.URL
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	testenv.Must(t, err, "pool")
	t.Cleanup(pool.Close)
	_, err = postgres.NewDriver(pool).Migrate(ctx)
	testenv.Must(t, err, "migrate")
	_, err = pool.Exec(ctx, `SELECT pg_create_logical_replication_slot('courier_ha', 'pgoutput')`)
	testenv.Must(t, err, "create slot")
	testenv.Eventually(t, 30*time.Second, func() bool {
		var n int
		return pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'`).Scan(&n) == nil && n == 1
	}, "the standby does not stream")

	code, st, errOut := statusJSONOf(t, "--database-url", url)
	if code != 0 || len(st.Slots) != 1 || st.Slots[0].Standbys != 1 || st.Slots[0].Failover || len(st.Warnings) != 1 ||
		!strings.Contains(st.Warnings[0], "replication slot courier_ha is not kept on the 1 standby") {
		t.Fatalf("status --json with a standby: exit %d, slots %+v, warnings %q, stderr %s", code, st.Slots, st.Warnings, errOut)
	}
	code, out, errOut := runCLI(t, "status", "--database-url", url)
	if code != 0 || !strings.Contains(out, "warning: replication slot courier_ha is not kept") || !strings.Contains(out, "table-less messages (postgres.LogOnly)") {
		t.Fatalf("status with a standby: exit %d, stderr %s, output:\n%s", code, errOut, out)
	}

	standby.Stop()
	testenv.Eventually(t, 30*time.Second, func() bool {
		var n int
		return pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication`).Scan(&n) == nil && n == 0
	}, "the standby still streams")
	code, st, errOut = statusJSONOf(t, "--database-url", url)
	if code != 0 || len(st.Slots) != 1 || st.Slots[0].Standbys != 0 || st.Warnings != nil {
		t.Fatalf("status --json without a standby: exit %d, slots %+v, warnings %q, stderr %s", code, st.Slots, st.Warnings, errOut)
	}
	_, err = pool.Exec(ctx, `SELECT pg_drop_replication_slot('courier_ha')`)
	testenv.Must(t, err, "drop slot")
}
