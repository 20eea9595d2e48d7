package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/store/mysql"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// dlqDatabase is a migrated database of one dialect for the dead-letter
// commands: its URL, a handle for checks, the statements that seed one
// relay dead letter (id 41) and one parked delivery (id 1), and the SQL
// that writes the current time as the dialect stores times.
type dlqDatabase struct {
	url  string
	db   *sql.DB
	seed []string
	now  string
}

const (
	seedRelayColumns = `INSERT INTO courier_outbox_dead_letters
    (id, message_id, topic, ordering_key, type, version, content_type, payload, headers, occurred_at, created_at, attempts, last_error, history, dead_at)
VALUES (41, '01939f3a-0000-7000-8000-000000000001', 'orders', 'order-9', 'OrderPlaced', 1, 'application/json', '{"x":1}', NULL, `
	seedRelayRest     = `, 10, 'nats: message size exceeds maximum allowed', '[{"at":"2026-11-29T09:59:00Z","error":"nats: connection closed","counted":false},{"at":"2026-11-29T10:00:00Z","error":"too big","counted":true}]', `
	seedParkedColumns = `INSERT INTO courier_inbox_dead_letters (consumer, message_id, subject, headers, payload, reason, last_error, attempts, parked_at)
VALUES ('billing', '01939f3a-0000-7000-8000-000000000002', 'courier.payments', '{"Courier-Type":["ChargeRequested"]}', 'x', 'failed', 'card declined', 5, `
)

// seedDeadLetters returns the seeding statements with now written as the
// dialect stores times.
func seedDeadLetters(now string) []string {
	return []string{seedRelayColumns + now + ", " + now + seedRelayRest + now + ")", seedParkedColumns + now + ")"}
}

func dlqDatabases(t *testing.T) map[string]func(t *testing.T) dlqDatabase {
	return map[string]func(t *testing.T) dlqDatabase{
		"postgres": func(t *testing.T) dlqDatabase {
			pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
			db := stdlib.OpenDBFromPool(pg.Pool)
			t.Cleanup(func() { db.Close() })
			return dlqDatabase{url: pg.URL, db: db, seed: seedDeadLetters("now()"), now: "now()"}
		},
		"sqlite": func(t *testing.T) dlqDatabase {
			path := filepath.Join(t.TempDir(), "dlq.db")
			db, err := sqlite.Open(path)
			testenv.Must(t, err, "open")
			t.Cleanup(func() { db.Close() })
			_, err = sqlite.Migrate(context.Background(), db)
			testenv.Must(t, err, "migrate")
			now := fmt.Sprint(time.Now().UnixMicro())
			return dlqDatabase{url: "sqlite://" + path, db: db, seed: seedDeadLetters(now), now: now}
		},
		"mysql": func(t *testing.T) dlqDatabase {
			my := testenv.MySQL(t, testenv.Migrate(mysql.NewDriver))
			return dlqDatabase{url: mysqlURL(t, my.DSN), db: my.DB, seed: seedDeadLetters("NOW(6)"), now: "NOW(6)"}
		},
	}
}

// The dead-letter commands list, show, replay and discard relay-side and
// consume-side dead letters on every dialect.
func TestDLQCommands(t *testing.T) {
	for name, open := range dlqDatabases(t) {
		t.Run(name, func(t *testing.T) { testDLQCommands(t, open(t)) })
	}
}

func testDLQCommands(t *testing.T, d dlqDatabase) {
	for _, q := range d.seed {
		_, err := d.db.Exec(q)
		testenv.Must(t, err, "seed dead letters")
	}
	db := []string{"--database-url", d.url}

	code, out, errOut := runCLI(t, append([]string{"dlq", "list"}, db...)...)
	if code != 0 || !strings.Contains(out, "relay:41") || !strings.Contains(out, "consumer:1") || !strings.Contains(out, "card declined") {
		t.Fatalf("dlq list: %d\n%s%s", code, out, errOut)
	}
	// Consumer letters show their type, subject and message id too.
	if !regexp.MustCompile(`(?m)^consumer:1 .*billing ← courier\.payments +ChargeRequested +01939f3a-0000-7000-8000-000000000002 +5 +failed: card declined$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^relay:41 .*topic orders +OrderPlaced +01939f3a-0000-7000-8000-000000000001 +10 +nats: message size`).MatchString(out) {
		t.Fatalf("dlq list lacks a letter's source, type or message id:\n%s", out)
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
	// Each attempt shows whether it counted or was blamed on the broker.
	code, out, _ = runCLI(t, append([]string{"dlq", "show", "relay:41"}, db...)...)
	if code != 0 || !strings.Contains(out, "nats: message size exceeds maximum allowed") || !strings.Contains(out, `{"x":1}`) ||
		!regexp.MustCompile(`(?m)^1 +2026-11-29 09:59:00 +broker +nats: connection closed$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^2 +2026-11-29 10:00:00 +counted +too big$`).MatchString(out) {
		t.Fatalf("dlq show: %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, append([]string{"dlq", "show", "--json", "relay:41"}, db...)...)
	var shown struct {
		LastError string `json:"last_error"`
		History   []struct {
			Error   string `json:"error"`
			Counted *bool  `json:"counted"`
		} `json:"history"`
	}
	testenv.Must(t, json.Unmarshal([]byte(out), &shown), "show json")
	if code != 0 || shown.LastError != "nats: message size exceeds maximum allowed" || len(shown.History) != 2 ||
		shown.History[0].Counted == nil || *shown.History[0].Counted || shown.History[1].Counted == nil || !*shown.History[1].Counted {
		t.Fatalf("dlq show --json: %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, append([]string{"dlq", "show", "consumer:1"}, db...)...)
	if code != 0 || !strings.Contains(out, "billing") || !strings.Contains(out, "card declined") || !strings.Contains(out, "courier.payments") {
		t.Fatalf("dlq show consumer:1: %d\n%s", code, out)
	}

	if code, _, _ = runCLI(t, append([]string{"dlq", "replay", "relay:41"}, db...)...); code != 0 {
		t.Fatal("replay relay:41 failed")
	}
	var id int64
	var attempts int
	testenv.Must(t, d.db.QueryRow(`SELECT id, attempts FROM courier_outbox WHERE message_id = '01939f3a-0000-7000-8000-000000000001'`).Scan(&id, &attempts), "replayed row")
	if id != 41 || attempts != 0 {
		t.Fatalf("replayed row has id %d, attempts %d; want its old place (41) and a fresh count", id, attempts)
	}
	if code, _, _ = runCLI(t, append([]string{"dlq", "replay", "consumer:1"}, db...)...); code != 0 {
		t.Fatal("replay consumer:1 failed")
	}
	var asked bool
	testenv.Must(t, d.db.QueryRow(`SELECT replay_requested IS NOT NULL FROM courier_inbox_dead_letters WHERE id = 1`).Scan(&asked), "replay flag")
	if !asked {
		t.Fatal("consume-side replay not requested")
	}
	// A consumer letter's headers can be repaired before its replay.
	if code, _, errOut := runCLI(t, append([]string{"dlq", "replay", "consumer:1", "--set-header", "Courier-Type=ChargeRequestedV2"}, db...)...); code != 0 {
		t.Fatalf("replay --set-header: %d %s", code, errOut)
	}
	if code, out, _ := runCLI(t, append([]string{"dlq", "show", "consumer:1"}, db...)...); code != 0 || !strings.Contains(out, "Courier-Type: ChargeRequestedV2") {
		t.Fatalf("show after --set-header: %d\n%s", code, out)
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

// Replay and discard select dead letters by topic, consumer, error or side;
// --dry-run only says what they would do.
func TestDLQBulk(t *testing.T) {
	d := dlqDatabases(t)["sqlite"](t)
	for _, q := range d.seed {
		_, err := d.db.Exec(q)
		testenv.Must(t, err, "seed dead letters")
	}
	parkedInsert(t, d.db, 2, "01939f3a-0000-7000-8000-000000000013", "ReserveStock", "x")
	_, err := d.db.Exec(`UPDATE courier_inbox_dead_letters SET consumer = 'stock', subject = 'courier.inventory', last_error = 'out of stock' WHERE id = 2`)
	testenv.Must(t, err, "second consumer")
	db := []string{"--database-url", d.url}
	count := func(table string) (n int) {
		testenv.Must(t, d.db.QueryRow("SELECT count(*) FROM "+table).Scan(&n), "count")
		return n
	}

	code, out, errOut := runCLI(t, append([]string{"dlq", "discard", "--side", "consumer", "--dry-run"}, db...)...)
	if code != 0 || !strings.Contains(out, "would discard consumer:1") || !strings.Contains(out, "would discard consumer:2") ||
		strings.Contains(out, "relay:41") || !strings.Contains(out, "2 dead letter(s) would be discarded") || count("courier_inbox_dead_letters") != 2 {
		t.Fatalf("discard --dry-run: %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut = runCLI(t, append([]string{"dlq", "discard"}, db...)...); code != 1 || !strings.Contains(errOut, "which dead letters?") {
		t.Fatalf("discard without a selection: %d %q", code, errOut)
	}
	if code, _, errOut = runCLI(t, append([]string{"dlq", "replay", "relay:41", "--topic", "orders"}, db...)...); code != 1 || !strings.Contains(errOut, "not both") {
		t.Fatalf("replay with refs and filters: %d %q", code, errOut)
	}
	code, out, errOut = runCLI(t, append([]string{"dlq", "discard", "--error", "out of stock"}, db...)...)
	if code != 0 || strings.TrimSpace(out) != "consumer:2 discarded" || count("courier_inbox_dead_letters") != 1 {
		t.Fatalf("discard --error: %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, append([]string{"dlq", "replay", "--topic", "payments"}, db...)...)
	if code != 0 || !strings.Contains(out, "consumer:1: replay requested; consumer billing applies it when it next looks") {
		t.Fatalf("replay --topic payments: %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, append([]string{"dlq", "replay", "--topic", "orders"}, db...)...)
	if code != 0 || !strings.Contains(out, "relay:41 is back in the outbox") || count("courier_outbox") != 1 {
		t.Fatalf("replay --topic orders: %d\n%s%s", code, out, errOut)
	}
	if code, out, _ = runCLI(t, append([]string{"dlq", "replay", "--all"}, db...)...); code != 0 || !strings.Contains(out, "consumer:1") {
		t.Fatalf("replay --all: %d\n%s", code, out)
	}
}

// A delivery parked behind the one that holds its key (inbox.ConsumerConfig
// HoldKeys) is listed as held behind that one, on every dialect, and shown
// with its key and its cause; the key's cause is listed as any parked
// delivery.
func TestDLQListHeld(t *testing.T) {
	for name, open := range dlqDatabases(t) {
		t.Run(name, func(t *testing.T) {
			d := open(t)
			seed := func(q string, args ...any) {
				t.Helper()
				_, err := d.db.Exec(q, args...)
				testenv.Must(t, err, "seed held deliveries")
			}
			parked := func(messageID string) (id int64) {
				t.Helper()
				testenv.Must(t, d.db.QueryRow(`SELECT id FROM courier_inbox_dead_letters WHERE message_id = '`+messageID+`'`).Scan(&id), "parked id")
				return id
			}
			seed(`INSERT INTO courier_inbox_dead_letters (consumer, message_id, subject, headers, payload, reason, last_error, attempts, parked_at, ordering_key)
VALUES ('ledger', '01939f3a-0000-7000-8000-000000000007', 'courier.accounts', NULL, 'x', 'failed', 'boom', 3, ` + d.now + `, 'acct-1')`)
			cause := parked("01939f3a-0000-7000-8000-000000000007")
			c := strconv.FormatInt(cause, 10)
			seed(`INSERT INTO courier_inbox_dead_letters (consumer, message_id, subject, headers, payload, reason, last_error, attempts, parked_at, ordering_key, behind)
VALUES ('ledger', '01939f3a-0000-7000-8000-000000000008', 'courier.accounts', NULL, 'x', 'held', 'key held by parked message 1000', 0, ` + d.now + `, 'acct-1', ` + c + `)`)
			seed(`INSERT INTO courier_inbox_holds (consumer, ordering_key, cause, since) VALUES ('ledger', 'acct-1', ` + c + `, ` + d.now + `)`)
			held := strconv.FormatInt(parked("01939f3a-0000-7000-8000-000000000008"), 10)
			db := []string{"--database-url", d.url}
			code, out, errOut := runCLI(t, append([]string{"dlq", "list"}, db...)...)
			if code != 0 || !regexp.MustCompile(`(?m)^consumer:`+held+` .*ledger ← courier\.accounts .* 0 +held behind consumer:`+c+`$`).MatchString(out) ||
				!regexp.MustCompile(`(?m)^consumer:`+c+` .* 3 +failed: boom$`).MatchString(out) {
				t.Fatalf("dlq list: %d, want consumer:%s held behind consumer:%s (not its stale error), consumer:%s as it is\n%s%s",
					code, held, c, c, out, errOut)
			}
			code, out, _ = runCLI(t, append([]string{"dlq", "list", "--json"}, db...)...)
			var listed struct {
				Consumer []struct {
					ID     int64  `json:"id"`
					Key    string `json:"key"`
					Behind int64  `json:"behind"`
				} `json:"consumer"`
			}
			testenv.Must(t, json.Unmarshal([]byte(out), &listed), "list json")
			if code != 0 || len(listed.Consumer) != 2 || listed.Consumer[0].Key != "acct-1" || listed.Consumer[0].Behind != 0 ||
				listed.Consumer[1].Key != "acct-1" || listed.Consumer[1].Behind != cause {
				t.Fatalf("dlq list --json: %d %+v; want %d holding acct-1 and one behind it", code, listed, cause)
			}
			code, out, _ = runCLI(t, append([]string{"dlq", "show", "consumer:" + held}, db...)...)
			if code != 0 || !regexp.MustCompile(`(?m)^key +acct-1$`).MatchString(out) ||
				!regexp.MustCompile(`(?m)^held behind +consumer:`+c+`$`).MatchString(out) {
				t.Fatalf("dlq show consumer:%s: %d\n%s", held, code, out)
			}
			code, out, _ = runCLI(t, append([]string{"dlq", "show", "consumer:" + c}, db...)...)
			if code != 0 || !regexp.MustCompile(`(?m)^key +acct-1$`).MatchString(out) || strings.Contains(out, "held behind") {
				t.Fatalf("dlq show consumer:%s: %d\n%s", c, code, out)
			}
		})
	}
}
