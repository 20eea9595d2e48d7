package dashboard_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/dashboard"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store"
)

// TestOperationsPages checks the pages built on store.Operations: the
// outbox per topic and the relays' leases, consumers' failures, sagas by
// state with the overdue ones and a timeline, idempotency keys left in
// flight.
func TestOperationsPages(t *testing.T) {
	for name, url := range databases {
		t.Run(name, func(t *testing.T) { testOperationsPages(t, url(t)) })
	}
}

func testOperationsPages(t *testing.T, dbURL string) {
	ctx := context.Background()
	f := newFixtureAt(t, dbURL, []string{"orders"}, []string{"too big"})
	drv := f.drv

	// Two pending messages of topic shipments, one of them leased.
	var msgs []courier.Message
	for i := range 2 {
		id, _ := uuid.NewV7()
		msgs = append(msgs, courier.Message{ID: id, Topic: "shipments", Key: "s" + string(rune('a'+i)), Type: "Shipped", Version: 1, Payload: []byte("{}"), OccurredAt: time.Now()})
	}
	testenv.Must(t, drv.InTx(ctx, func(tx *sql.Tx) error { return drv.Inserter().Insert(ctx, tx, msgs) }), "insert")
	rs, err := drv.RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "relay store")
	b, err := rs.Claim(ctx, "relay-on-host-7", 1, time.Hour)
	testenv.Must(t, err, "claim")
	if len(b.Records) != 1 {
		t.Fatalf("claimed %d rows, want 1", len(b.Records))
	}

	// A consumer's failed run.
	_, err = drv.ConsumerStore().RecordFailure(ctx, "shipping", msgs[0].ID, store.Attempt{At: time.Now(), Error: "warehouse down"})
	testenv.Must(t, err, "record failure")

	// A saga past its deadline, with a transition and an ignored event.
	past := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	err = drv.Sagas().InTx(ctx, func(tx *sql.Tx) error {
		s := drv.Sagas()
		if err := s.Create(ctx, tx, store.SagaRecord{Type: "order", ID: "o-42", State: "awaiting_payment", Phase: "running",
			Data: []byte("{}"), Deadline: &past, Version: 1, CreatedAt: past, UpdatedAt: past}); err != nil {
			return err
		}
		if err := s.Record(ctx, tx, store.SagaEvent{Type: "order", SagaID: "o-42", At: past, EventID: "e1", EventType: "OrderPlaced",
			From: "", To: "awaiting_payment", Outcome: "applied"}); err != nil {
			return err
		}
		return s.Record(ctx, tx, store.SagaEvent{Type: "order", SagaID: "o-42", At: past, EventID: "e2", EventType: "StockReserved",
			From: "awaiting_payment", To: "awaiting_payment", Outcome: "ignored", Reason: "not awaited in this state"})
	})
	testenv.Must(t, err, "saga")

	// An idempotency key left in flight past its lock.
	_, _, err = drv.Idempotency().Claim(ctx, store.KeyClaim{Scope: "POST /orders", Key: "key-left-behind", Fingerprint: []byte("f"),
		Owner: uuid.New(), LockFor: -time.Minute, Retain: time.Hour})
	testenv.Must(t, err, "claim key")

	srv := serve(t, dashboard.Config{Database: drv, Sagas: drv.Sagas()})
	c := newClient(t, srv.URL)
	has := func(path string, want ...string) {
		t.Helper()
		code, page := c.get(path)
		if code != 200 {
			t.Fatalf("%s: %d\n%s", path, code, page)
		}
		for _, w := range want {
			if !strings.Contains(page, w) {
				t.Fatalf("%s lacks %q:\n%s", path, w, page)
			}
		}
	}
	has("/", `id="pending">2<`, `<td>shipments</td><td class="num">2</td><td class="num">1</td>`, `<td>relay-on-host-7</td><td class="num">1</td><td class="num">1</td>`,
		`<td>orders</td><td class="num">0</td>`)
	has("/consumers", `<td>shipping</td><td class="num">0</td><td class="num">0</td>`, `<td class="num">1</td><td class="num">1</td>`)
	has("/sagas", `<td>order</td><td>running</td><td>awaiting_payment</td><td class="num">1</td>`, `href="/sagas/order/o-42"`)
	has("/sagas?state=completed", "No saga instances in completed")
	has("/sagas/order/o-42", "OrderPlaced", `class="ignored"`, "not awaited in this state")
	has("/keys", `id="in-flight">1<`, `id="lock-expired">1<`, "key-left-behind")
}
