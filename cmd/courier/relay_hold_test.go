package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/webhook"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store/postgres"
	"github.com/courier-go/courier/store/sqlite"
)

// heldEndpoint is a webhook endpoint that refuses the poison for good (410
// Gone) until it is cured, and records what it took.
type heldEndpoint struct {
	poison string // its message id
	cured  atomic.Bool
	tried  atomic.Int64 // requests for the poison
	mu     sync.Mutex
	got    []courier.Message
}

func (e *heldEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m, err := webhook.VerifyMessage(r, webhookSecret)
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	if m.ID.String() == e.poison && !e.cured.Load() {
		e.tried.Add(1)
		http.Error(w, "no such order", http.StatusGone)
		return
	}
	e.mu.Lock()
	e.got = append(e.got, courier.Message{ID: m.ID, Key: m.Key, Topic: m.Topic, Payload: m.Payload})
	e.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// of returns the payloads the endpoint took of key, in order.
func (e *heldEndpoint) of(key string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, m := range e.got {
		if m.Key == key {
			out = append(out, string(m.Payload))
		}
	}
	return out
}

// took reports whether the endpoint took every one of msgs.
func (e *heldEndpoint) took(msgs ...courier.Message) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range msgs {
		if !slices.ContainsFunc(e.got, func(g courier.Message) bool { return g.ID == m.ID }) {
			return false
		}
	}
	return true
}

// holdOutbox is an outbox the held-keys test runs a relay on.
type holdOutbox struct {
	url string
	// args are the relay's flags for it.
	args []string
	// write commits msgs in one transaction.
	write func(msgs ...courier.Message)
	// deadLetter returns the id of message id's dead letter.
	deadLetter func(id string) int64
}

// sqliteHoldOutbox is a new SQLite outbox, relayed by polling.
func sqliteHoldOutbox(t *testing.T) holdOutbox {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "courier.db")
	url := "sqlite://" + path
	if code, out, errOut := runCLI(t, "migrate", "--database-url", url); code != 0 {
		t.Fatalf("migrate: %d %q %q", code, out, errOut)
	}
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open")
	t.Cleanup(func() { db.Close() })
	return holdOutbox{url: url, args: []string{"--poll-interval", "50ms"},
		write: func(msgs ...courier.Message) {
			t.Helper()
			tx, err := db.BeginTx(ctx, nil)
			testenv.Must(t, err, "begin")
			testenv.Must(t, outbox.New(sqlite.DatabaseSQL(), outbox.Config{}).Write(ctx, tx, msgs...), "write")
			testenv.Must(t, tx.Commit(), "commit")
		},
		deadLetter: func(id string) int64 {
			var n int64
			testenv.Must(t, db.QueryRowContext(ctx, `SELECT id FROM courier_outbox_dead_letters WHERE message_id = ?`, id).Scan(&n), "dead letter id")
			return n
		}}
}

// postgresCDCOutbox is a new PostgreSQL outbox, relayed from the log
// (--mode cdc) through a slot of its own.
func postgresCDCOutbox(t *testing.T) holdOutbox {
	ctx := context.Background()
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	slot := strings.ToLower(testenv.Name("hold_"))
	t.Cleanup(func() {
		testenv.Eventually(t, 10*time.Second, func() bool {
			_, err := pg.Admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
			return err == nil
		}, "drop slot %s", slot)
		_, _ = pg.Admin.Exec(ctx, "DROP PUBLICATION IF EXISTS "+slot)
	})
	w := outbox.New(postgres.Pgx(), outbox.Config{})
	return holdOutbox{url: pg.URL, args: []string{"--mode", "cdc", "--slot", slot, "--publication", slot},
		write: func(msgs ...courier.Message) {
			t.Helper()
			testenv.Must(t, pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) }), "write")
		},
		deadLetter: func(id string) int64 {
			var n int64
			testenv.Must(t, pg.Pool.QueryRow(ctx, `SELECT id FROM courier_outbox_dead_letters WHERE message_id = $1`, id).Scan(&n), "dead letter id")
			return n
		}}
}

// courier relay --hold-keys, polling (SQLite) and reading the log (--mode
// cdc, PostgreSQL): a message of a held topic that the endpoint refuses
// for good becomes a dead letter that stops its key, while the other keys
// flow; `courier dlq replay relay:ID` then publishes it, and the messages
// held behind it, in order.
func TestRelayHoldKeys(t *testing.T) {
	t.Run("poll", func(t *testing.T) { testRelayHoldKeys(t, sqliteHoldOutbox(t)) })
	t.Run("cdc", func(t *testing.T) { testRelayHoldKeys(t, postgresCDCOutbox(t)) })
}

func testRelayHoldKeys(t *testing.T, o holdOutbox) {
	order := func(key, name string) courier.Message {
		return courier.NewMessage("orders", key, "OrderChanged", []byte(name))
	}
	poison := order("held", "poison")
	var free []courier.Message
	for i := range 20 {
		free = append(free, order(fmt.Sprintf("free-%d", i%4), fmt.Sprint(i)))
	}
	o.write(order("held", "before"), poison, order("held", "after1"))
	o.write(free[:10]...)

	ep := &heldEndpoint{poison: poison.ID.String()}
	srv := httptest.NewServer(ep)
	defer srv.Close()
	cmd := exec.Command(os.Args[0], append([]string{"relay", "--log-format", "json", "--broker-url", srv.URL}, o.args...)...)
	cmd.Env = append(os.Environ(), "COURIER_TEST_BE_CLI=1", "COURIER_DATABASE_URL="+o.url,
		"COURIER_WEBHOOK_SECRET="+webhookSecret, "COURIER_HOLD_KEYS=orders")
	var logs lockedBuffer
	cmd.Stderr = &logs
	testenv.Must(t, cmd.Start(), "start relay")
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()

	status := func() map[string]float64 { return outboxStatus(t, o.url) }
	testenv.Eventually(t, 30*time.Second, func() bool {
		return ep.took(free[:10]...) && ep.tried.Load() == 1 && status()["dead_letters"] == 1
	}, "the poison is not a dead letter, or the other keys did not flow: %v; logs:\n%s", testenv.Lazy(func() any { return status() }), &logs)
	// Later messages of the held key wait; a later key's messages, written
	// after them, flow.
	o.write(order("held", "after2"))
	o.write(free[10:]...)
	testenv.Eventually(t, 30*time.Second, func() bool {
		s := status()
		return ep.took(free...) && s["held_keys"] == 1 && s["held"] == 2 && s["pending"] == 0
	}, "the held key's messages are not held: %v; logs:\n%s", testenv.Lazy(func() any { return status() }), &logs)
	if got := ep.of("held"); !slices.Equal(got, []string{"before"}) {
		t.Fatalf("the held key published %q, want before alone", got)
	}

	ep.cured.Store(true)
	if code, out, errOut := runCLI(t, "dlq", "replay", "--database-url", o.url, fmt.Sprintf("relay:%d", o.deadLetter(poison.ID.String()))); code != 0 {
		t.Fatalf("dlq replay: %d %q %q", code, out, errOut)
	}
	want := []string{"before", "poison", "after1", "after2"}
	testenv.Eventually(t, 30*time.Second, func() bool { return len(ep.of("held")) >= len(want) },
		"the held key did not go on: %q; %v; logs:\n%s", testenv.Lazy(func() any { return ep.of("held") }), testenv.Lazy(func() any { return status() }), &logs)
	if got := ep.of("held"); !slices.Equal(got, want) {
		t.Fatalf("the held key published %q, want %q", got, want)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		s := status()
		return s["held_keys"] == 0 && s["held"] == 0 && s["dead_letters"] == 0 && s["pending"] == 0
	}, "status after the replay: %v", testenv.Lazy(func() any { return status() }))
	testenv.Must(t, cmd.Process.Signal(syscall.SIGTERM), "sigterm")
	err := cmd.Wait()
	stopped = true
	if err != nil {
		t.Fatalf("relay exit after SIGTERM: %v\n%s", err, logs.String())
	}
}
