package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/postgres"
)

func TestCommitPublishesRollbackDoesNot(t *testing.T) {
	onEachDatabase(t, testCommitPublishesRollbackDoesNot)
}

func testCommitPublishesRollbackDoesNot(t *testing.T, db database) {
	h := newHarness(t, db, anyNATS)
	h.startRelay(h.publisher(), h.relayConfig())
	ctx := context.Background()

	// The database's own writer (pgx on PostgreSQL, database/sql on
	// SQLite): one committed, one rolled back.
	committed := courier.NewMessage("events", "order-1", "OrderPlaced", []byte("commit"), courier.WithHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	testenv.Must(t, h.writeTx(ctx, true, committed), "write and commit")
	testenv.Must(t, h.writeTx(ctx, false, courier.NewMessage("events", "order-2", "OrderPlaced", []byte("rollback"))), "write and roll back")
	wanted := []courier.Message{committed}

	if h.pg != nil {
		// database/sql on PostgreSQL: the same.
		sdb := openSQL(t, h.pg.URL)
		sw := outbox.New(postgres.DatabaseSQL(), outbox.Config{})
		sqlCommitted := courier.NewMessage("events", "order-3", "OrderPlaced", []byte("sql-commit"), courier.WithHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
		stx, err := sdb.BeginTx(ctx, nil)
		testenv.Must(t, err, "sql begin")
		testenv.Must(t, sw.Write(ctx, stx, sqlCommitted), "sql write")
		testenv.Must(t, stx.Commit(), "sql commit")
		stx, err = sdb.BeginTx(ctx, nil)
		testenv.Must(t, err, "sql begin")
		testenv.Must(t, sw.Write(ctx, stx, courier.NewMessage("events", "order-4", "OrderPlaced", []byte("sql-rollback"))), "sql write")
		testenv.Must(t, stx.Rollback(), "sql rollback")
		wanted = append(wanted, sqlCommitted)
	}

	// Drained: every row was published and acknowledged before the relay
	// deleted it, so the stream holds all the relay published.
	h.waitDrained()
	got := h.received()
	if len(got) != len(wanted) {
		t.Fatalf("stream holds %d messages, want the %d committed ones: %+v", len(got), len(wanted), got)
	}
	byID := map[string]courier.Message{}
	for _, m := range got {
		byID[m.ID.String()] = m
	}
	for _, want := range wanted {
		m, ok := byID[want.ID.String()]
		if !ok {
			t.Fatalf("committed message %s (%s) not received", want.ID, want.Payload)
		}
		if string(m.Payload) != string(want.Payload) || m.Key != want.Key || m.Type != want.Type || m.Topic != want.Topic ||
			m.Version != want.Version || !m.OccurredAt.Equal(want.OccurredAt.Truncate(time.Microsecond)) {
			t.Errorf("received %+v, want %+v", m, want)
		}
		for k, v := range want.Headers {
			if m.Headers[k] != v {
				t.Errorf("header %s = %q, want %q", k, m.Headers[k], v)
			}
		}
	}
}

func TestThreeRelaysKeepPerKeyOrder(t *testing.T) {
	onEachDatabase(t, testThreeRelaysKeepPerKeyOrder)
}

func testThreeRelaysKeepPerKeyOrder(t *testing.T, db database) {
	h := newHarness(t, db, anyNATS)
	n, keys := 50000, 500
	if testing.Short() || raceEnabled && db.name == onSQLite.name {
		n = 5000
	}
	var relays []*relay.Relay
	for range 3 {
		cfg := h.relayConfig()
		cfg.BatchSize = 500
		r, _ := h.startRelay(h.publisher(), cfg)
		relays = append(relays, r)
	}
	start := time.Now()
	written := h.produce(n, keys, 50)
	h.waitDrained()
	elapsed := time.Since(start)
	got := h.received()
	dups := checkDelivery(t, written, got)
	var perRelay []int64
	for _, r := range relays {
		perRelay = append(perRelay, r.Metrics().Published)
	}
	t.Logf("%d messages on %d keys through 3 relays in %s; published per relay %v; %d duplicates in the stream", n, keys, elapsed, perRelay, dups)
}

func TestHotKeyBurstDrainsInBatches(t *testing.T) {
	onEachDatabase(t, testHotKeyBurstDrainsInBatches)
}

func testHotKeyBurstDrainsInBatches(t *testing.T, db database) {
	h := newHarness(t, db, anyNATS)
	written := h.produce(10000, 1, 1000)
	cfg := h.relayConfig()
	cfg.BatchSize = 1000
	start := time.Now()
	r, _ := h.startRelay(h.publisher(), cfg)
	h.waitDrained()
	elapsed := time.Since(start)
	got := h.received()
	checkDelivery(t, written, got)
	m := r.Metrics()
	// A relay that could only claim the oldest row of a key would need 10,000
	// claims; batch claiming needs about ten.
	if m.Batches > 40 {
		t.Fatalf("10,000 messages of one key took %d batches; want claims of whole batches", m.Batches)
	}
	t.Logf("10,000 messages on one key: %d batches, %s (%.0f msg/s)", m.Batches, elapsed, 10000/elapsed.Seconds())
}
