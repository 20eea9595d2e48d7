package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/audit"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// loadDB is a migrated database the test writes to while a relay process
// publishes from it.
type loadDB struct {
	url   string
	ops   store.Operations
	write func(ctx context.Context, msgs ...courier.Message) error
}

func newLoadDB[TTx any](url string, d store.Driver[TTx]) loadDB {
	w := outbox.New(d.Inserter(), outbox.Config{})
	return loadDB{url: url, ops: d.Operations(), write: func(ctx context.Context, msgs ...courier.Message) error {
		return d.InTx(ctx, func(tx TTx) error { return w.Write(ctx, tx, msgs...) })
	}}
}

// courier audit --watch --interval 1s watches a `courier relay
// --keep-published` process under load (the test commits ten messages
// every 20ms over 200 keys): courier status --fail-if-audit-finding passes
// while nothing is wrong. The test publishes a message nobody wrote and
// one the relay published again; within two passes the watch counts
// them, and nothing else: courier status --fail-if-audit-finding fails
// naming the phantom (a duplicate is no alarm), and status --json lists
// both. On PostgreSQL and SQLite, to NATS.
func TestAuditWatchUnderLoad(t *testing.T) {
	for _, c := range []struct {
		name string
		open func(t *testing.T) loadDB
	}{
		{"postgres", func(t *testing.T) loadDB {
			pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
			return newLoadDB(pg.URL, postgres.NewDriver(pg.Pool))
		}},
		{"sqlite", func(t *testing.T) loadDB {
			path := filepath.Join(t.TempDir(), "courier.db")
			if code, out, errOut := runCLI(t, "migrate", "--database-url", "sqlite://"+path); code != 0 {
				t.Fatalf("migrate: %d %q %q", code, out, errOut)
			}
			db, err := sqlite.Open(path)
			testenv.Must(t, err, "open")
			t.Cleanup(func() { db.Close() })
			return newLoadDB[*sql.Tx]("sqlite://"+path, sqlite.NewDriver(db))
		}},
	} {
		t.Run(c.name, func(t *testing.T) { testAuditWatchUnderLoad(t, c.open(t)) })
	}
}

func testAuditWatchUnderLoad(t *testing.T, db loadDB) {
	ctx := context.Background()
	natsURL := testenv.NATSOrEmbedded(t)
	nc := testenv.Connect(t, natsURL)
	stream := testenv.Name("WLOAD")
	mapping := couriernats.Config{SubjectPrefix: strings.ToLower(stream) + "."}
	// A short duplicate window, so that the test can store a message
	// again; the relay keeps the stream's settings.
	const window = 2 * time.Second
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: stream, Duplicates: window}), "stream")

	first := startLoadWriter(t, db)
	startServedRelay(t, []string{"COURIER_DATABASE_URL=" + db.url}, "--broker-url", natsURL, "--stream", stream,
		"--subject-prefix", mapping.SubjectPrefix, "--keep-published")
	w := startServed(t, nil, "audit", "--database-url", db.url, "--broker-url", natsURL, "--stream", stream,
		"--subject-prefix", mapping.SubjectPrefix, "--watch", "--interval", "1s", "--slack", "500ms", "--remember", "5m")
	name := `{watch="nats:` + stream + `"}`
	metric := func(series string) float64 {
		_, body := w.get(t, "/metrics")
		v, ok := metricValue(body, series+name)
		if !ok {
			return -1
		}
		return v
	}
	metrics := testenv.Lazy(func() any { _, b := w.get(t, "/metrics"); return b + w.Logs() })
	testenv.Eventually(t, time.Minute, func() bool { return metric("courier_audit_judged_messages_total") >= 1000 },
		"the watch never judged 1,000 messages under load:\n%s", metrics)
	if code, out, errOut := runCLI(t, "status", "--database-url", db.url, "--fail-if-audit-finding"); code != 0 {
		t.Fatalf("status --fail-if-audit-finding under load, nothing wrong: exit %d\n%s\n%s", code, out, errOut)
	}

	// A phantom, and the load's first message again after the window.
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
	testenv.Must(t, err, "publisher")
	phantom := courier.NewMessage("orders", testenv.Name("phantom-"), "OrderPlaced", []byte(`{}`))
	time.Sleep(time.Until(copiedAt(t, db, first).Add(window + 200*time.Millisecond)))
	passes := metric("courier_audit_passes_total")
	testenv.Must(t, pub.Publish(ctx, []courier.Message{phantom, first})[1], "publish a published message again")
	testenv.Eventually(t, 30*time.Second, func() bool {
		return metric("courier_audit_phantom_messages_total") == 1 && metric("courier_audit_duplicate_messages_total") == 1
	}, "the watch did not find the phantom and the duplicate:\n%s", metrics)
	// Two passes, and the one under way when the test published.
	if n := metric("courier_audit_passes_total") - passes; n > 3 {
		t.Errorf("the watch found the phantom and the duplicate %v passes after they were published; want at most two (and the one under way)", n)
	}
	for _, series := range []string{"courier_audit_lost_messages_total", "courier_audit_order_breaks_total", "courier_audit_pass_errors_total"} {
		if v := metric(series); v != 0 {
			t.Errorf("%s%s = %v under load, want 0:\n%s", series, name, v, metrics)
		}
	}

	code, out, errOut := runCLI(t, "status", "--database-url", db.url, "--fail-if-audit-finding")
	if code != 1 || !strings.Contains(errOut, "continuous audit nats:"+stream+" found 0 lost, 1 phantoms, 0 order breaks") {
		t.Errorf("status --fail-if-audit-finding after a phantom: exit %d, %s", code, errOut)
	}
	for _, want := range []string{audit.Title(audit.KindPhantom) + " (1)", phantom.ID.String()} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	// The duplicate is no alarm: status --json lists it with the phantom.
	_, st, _ := statusJSONOf(t, "--database-url", db.url)
	if len(st.Watches) != 1 || st.Watches[0].Phantoms != 1 || st.Watches[0].Duplicates != 1 || st.Watches[0].Lost != 0 || st.Watches[0].OrderBreaks != 0 {
		t.Fatalf("status --json: %+v", st.Watches)
	}
	findings, err := audit.SavedFindings(st.Watches[0].AuditWatch)
	testenv.Must(t, err, "findings")
	got := map[string]string{}
	for _, f := range findings {
		got[f.Kind] = f.MessageID
	}
	if len(findings) != 2 || got[audit.KindPhantom] != phantom.ID.String() || got[audit.KindDuplicate] != first.ID.String() {
		t.Errorf("status --json findings %+v; want the phantom %s and the duplicate %s", findings, phantom.ID, first.ID)
	}
}

// startLoadWriter commits ten messages every 20ms over 200 keys to db
// until the test ends, and returns the first message it wrote.
func startLoadWriter(t *testing.T, db loadDB) courier.Message {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	started := make(chan courier.Message, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; {
			msgs := make([]courier.Message, 10)
			for i := range msgs {
				msgs[i] = courier.NewMessage("orders", fmt.Sprintf("key-%d", n%200), "OrderPlaced", fmt.Appendf(nil, `{"n":%d}`, n))
				n++
			}
			if err := db.write(ctx, msgs...); err != nil {
				if ctx.Err() == nil {
					t.Errorf("write the load: %v", err)
				}
				return
			}
			if n == len(msgs) {
				started <- msgs[0]
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return <-started
}

// copiedAt waits until the relay has recorded m as published and
// returns when.
func copiedAt(t *testing.T, db loadDB, m courier.Message) time.Time {
	t.Helper()
	var at time.Time
	found := errors.New("found")
	testenv.Eventually(t, 30*time.Second, func() bool {
		err := db.ops.PublishedBetween(context.Background(), time.Now().Add(-time.Hour), time.Now().Add(time.Minute), func(c store.PublishedCopy) error {
			if c.MessageID == m.ID.String() {
				at = c.PublishedAt
				return found
			}
			return nil
		})
		return errors.Is(err, found)
	}, "the relay never recorded %s as published", m.ID)
	return at
}
