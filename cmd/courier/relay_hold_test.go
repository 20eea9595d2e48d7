package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/webhook"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
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

// courier relay --hold-keys: a message of a held topic that the endpoint
// refuses for good becomes a dead letter that stops its key, while the
// other keys flow; `courier dlq replay relay:ID` then publishes it, and
// the messages held behind it, in order.
func TestRelayHoldKeys(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "courier.db")
	url := "sqlite://" + path
	if code, out, errOut := runCLI(t, "migrate", "--database-url", url); code != 0 {
		t.Fatalf("migrate: %d %q %q", code, out, errOut)
	}
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open")
	defer db.Close()
	write := func(msgs ...courier.Message) {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		testenv.Must(t, err, "begin")
		testenv.Must(t, outbox.New(sqlite.DatabaseSQL(), outbox.Config{}).Write(ctx, tx, msgs...), "write")
		testenv.Must(t, tx.Commit(), "commit")
	}
	order := func(key, name string) courier.Message {
		return courier.NewMessage("orders", key, "OrderChanged", []byte(name))
	}
	poison := order("held", "poison")
	var free []courier.Message
	for i := range 20 {
		free = append(free, order(fmt.Sprintf("free-%d", i%4), fmt.Sprint(i)))
	}
	write(order("held", "before"), poison, order("held", "after1"))
	write(free[:10]...)

	ep := &heldEndpoint{poison: poison.ID.String()}
	srv := httptest.NewServer(ep)
	defer srv.Close()
	cmd := exec.Command(os.Args[0], "relay", "--log-format", "json", "--broker-url", srv.URL, "--poll-interval", "50ms")
	cmd.Env = append(os.Environ(), "COURIER_TEST_BE_CLI=1", "COURIER_DATABASE_URL="+url,
		"COURIER_WEBHOOK_SECRET="+webhookSecret, "COURIER_HOLD_KEYS=orders")
	var logs bytes.Buffer
	cmd.Stderr = &logs
	testenv.Must(t, cmd.Start(), "start relay")
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()

	status := func() map[string]float64 { return outboxStatus(t, url) }
	testenv.Eventually(t, 30*time.Second, func() bool {
		return ep.took(free[:10]...) && ep.tried.Load() == 1 && status()["dead_letters"] == 1
	}, "the poison is not a dead letter, or the other keys did not flow: %v; logs:\n%s", testenv.Lazy(func() any { return status() }), &logs)
	// Later messages of the held key wait; a later key's messages, written
	// after them, flow.
	write(order("held", "after2"))
	write(free[10:]...)
	testenv.Eventually(t, 30*time.Second, func() bool {
		s := status()
		return ep.took(free...) && s["held_keys"] == 1 && s["held"] == 2 && s["pending"] == 0
	}, "the held key's messages are not held: %v; logs:\n%s", testenv.Lazy(func() any { return status() }), &logs)
	if got := ep.of("held"); !slices.Equal(got, []string{"before"}) {
		t.Fatalf("the held key published %q, want before alone", got)
	}

	var id int64
	testenv.Must(t, db.QueryRowContext(ctx, `SELECT id FROM courier_outbox_dead_letters WHERE message_id = ?`, poison.ID.String()).Scan(&id), "dead letter id")
	ep.cured.Store(true)
	if code, out, errOut := runCLI(t, "dlq", "replay", "--database-url", url, fmt.Sprintf("relay:%d", id)); code != 0 {
		t.Fatalf("dlq replay: %d %q %q", code, out, errOut)
	}
	want := []string{"before", "poison", "after1", "after2"}
	testenv.Eventually(t, 30*time.Second, func() bool { return len(ep.of("held")) >= len(want) },
		"the held key did not go on: %q; %v; logs:\n%s", testenv.Lazy(func() any { return ep.of("held") }), testenv.Lazy(func() any { return status() }), &logs)
	if got := ep.of("held"); !slices.Equal(got, want) {
		t.Fatalf("the held key published %q, want %q", got, want)
	}
	if s := status(); s["held_keys"] != 0 || s["held"] != 0 || s["dead_letters"] != 0 {
		t.Fatalf("status after the replay: %v", s)
	}
	testenv.Must(t, cmd.Process.Signal(syscall.SIGTERM), "sigterm")
	err = cmd.Wait()
	stopped = true
	if err != nil {
		t.Fatalf("relay exit after SIGTERM: %v\n%s", err, logs.String())
	}
}
