package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/courier-go/courier/internal/testenv"
)

func TestDLQCommands(t *testing.T) {
	pg := testenv.Postgres(t, true)
	ctx := context.Background()
	_, err := pg.Pool.Exec(ctx, `INSERT INTO courier_outbox_dead_letters
    (id, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, attempts, last_error, history)
VALUES (41, '01939f3a-0000-7000-8000-000000000001', 'orders', 'order-9', 'OrderPlaced', 1, 'application/json', '{"x":1}', NULL,
        now(), now(), 10, 'nats: message size exceeds maximum allowed', '[{"at":"2026-11-29T10:00:00Z","error":"too big"}]')`)
	testenv.Must(t, err, "insert dead letter")
	_, err = pg.Pool.Exec(ctx, `INSERT INTO courier_inbox_dead_letters (consumer, message_id, subject, headers, payload, reason, last_error, attempts)
VALUES ('billing', '01939f3a-0000-7000-8000-000000000002', 'courier.payments', '{"Courier-Type":["ChargeRequested"]}', 'x', 'failed', 'card declined', 5)`)
	testenv.Must(t, err, "insert parked")
	db := []string{"--database-url", pg.URL}

	code, out, errOut := runCLI(t, append([]string{"dlq", "list"}, db...)...)
	if code != 0 || !strings.Contains(out, "relay:41") || !strings.Contains(out, "consumer:1") || !strings.Contains(out, "card declined") {
		t.Fatalf("dlq list: %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runCLI(t, append([]string{"dlq", "list", "--json", "--consumer", "billing"}, db...)...)
	var listed struct {
		Relay    []map[string]any `json:"relay"`
		Consumer []map[string]any `json:"consumer"`
	}
	testenv.Must(t, json.Unmarshal([]byte(out), &listed), "list json")
	if code != 0 || len(listed.Relay) != 0 || len(listed.Consumer) != 1 {
		t.Fatalf("dlq list --consumer billing: %+v", listed)
	}
	code, out, _ = runCLI(t, append([]string{"dlq", "show", "relay:41"}, db...)...)
	if code != 0 || !strings.Contains(out, `"last_error": "nats: message size exceeds maximum allowed"`) || !strings.Contains(out, "too big") {
		t.Fatalf("dlq show: %d\n%s", code, out)
	}

	if code, _, _ = runCLI(t, append([]string{"dlq", "replay", "relay:41"}, db...)...); code != 0 {
		t.Fatal("replay relay:41 failed")
	}
	var id int64
	var attempts int
	testenv.Must(t, pg.Pool.QueryRow(ctx, `SELECT id, attempts FROM courier_outbox WHERE message_id = '01939f3a-0000-7000-8000-000000000001'`).Scan(&id, &attempts), "replayed row")
	if id != 41 || attempts != 0 {
		t.Fatalf("replayed row has id %d, attempts %d; want its old place (41) and a fresh count", id, attempts)
	}
	if code, _, _ = runCLI(t, append([]string{"dlq", "replay", "consumer:1"}, db...)...); code != 0 {
		t.Fatal("replay consumer:1 failed")
	}
	var asked bool
	testenv.Must(t, pg.Pool.QueryRow(ctx, `SELECT replay_requested IS NOT NULL FROM courier_inbox_dead_letters WHERE id = 1`).Scan(&asked), "replay flag")
	if !asked {
		t.Fatal("consume-side replay not requested")
	}
	if code, _, _ = runCLI(t, append([]string{"dlq", "discard", "consumer:1"}, db...)...); code != 0 {
		t.Fatal("discard consumer:1 failed")
	}
	for _, bad := range []struct{ ref, want string }{
		{"consumer:1", "does not exist"},
		{"relay:41", "does not exist"},
		{"41", "use relay:ID or consumer:ID"},
		{"inbox:3", "use relay:ID or consumer:ID"},
	} {
		code, _, errOut := runCLI(t, append([]string{"dlq", "show", bad.ref}, db...)...)
		if code != 1 || !strings.Contains(errOut, bad.want) {
			t.Errorf("dlq show %s: %d %q, want %q", bad.ref, code, errOut, bad.want)
		}
	}
	if code, out, _ := runCLI(t, append([]string{"dlq", "list"}, db...)...); code != 0 || !strings.Contains(out, "no dead letters") {
		t.Fatalf("final list: %q", out)
	}
}
