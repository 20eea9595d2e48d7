package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/broker/nats/embedded"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The demo, run as `go run ./examples/orders` runs it, places three orders
// (four requests: one is retried with its Idempotency-Key) and billing
// applies each once.
func TestDemo(t *testing.T) {
	dir := t.TempDir()
	var out strings.Builder
	if err := run(t.Context(), config{dir: dir, addr: "127.0.0.1:0"}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	if !strings.Contains(out.String(), "(replayed") {
		t.Error("the retried request was not answered as a replay")
	}
	db := openDB(t, dir)
	checkBilledOnce(t, db, 3)
}

// A message delivered again after billing applied it changes nothing: the
// broker is made to forget billing's acknowledgements, so that it delivers
// every message of the stream again.
func TestRedeliveryAppliedOnce(t *testing.T) {
	dir := t.TempDir()
	if err := run(t.Context(), config{dir: dir, addr: "127.0.0.1:0"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	forgetBillingAcks(t, dir)

	s, err := open(t.Context(), dir, "127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.run(ctx) }()
	waitFor(t, "the three messages redelivered", func() bool {
		m := s.billing.Metrics()
		return m.Applied+m.Duplicates >= 3
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if m := s.billing.Metrics(); m.Applied != 0 || m.Duplicates != 3 {
		t.Errorf("billing after the redelivery: %+v, want 3 duplicates and nothing applied", m)
	}
	checkBilledOnce(t, s.db, 3)
}

// The API refuses requests without an API key or an Idempotency-Key, and
// keeps Idempotency-Keys per customer.
func TestAPI(t *testing.T) {
	s, err := open(t.Context(), t.TempDir(), "127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.run(ctx) }()

	post := func(apiKey, idemKey, body string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url()+"/orders", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+apiKey)
		}
		if idemKey != "" {
			req.Header.Set("Idempotency-Key", idemKey)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		return res.StatusCode
	}
	order := `{"item":"vinyl","total":1999}`
	for _, c := range []struct {
		name                  string
		apiKey, idemKey, body string
		want                  int
	}{
		{"no API key", "", "k1", order, http.StatusUnauthorized},
		{"unknown API key", "not-a-key", "k1", order, http.StatusUnauthorized},
		{"no Idempotency-Key", s.apiKeys["ada"], "", order, http.StatusBadRequest},
		{"bad body", s.apiKeys["ada"], "k1", `{"item":"vinyl"}`, http.StatusBadRequest},
		{"ada's order", s.apiKeys["ada"], "k2", order, http.StatusCreated},
		{"grace's order with ada's key", s.apiKeys["grace"], "k2", order, http.StatusCreated},
	} {
		if got := post(c.apiKey, c.idemKey, c.body); got != c.want {
			t.Errorf("%s: status %d, want %d", c.name, got, c.want)
		}
	}
	if err := waitBilled(ctx, s.db); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkBilledOnce(t, s.db, 2)
}

// A service that cannot start releases what it opened (goleak, in
// TestMain, sees an embedded NATS server left running) and says why.
func TestOpenFailsCleanly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().String()
	notAFile := t.TempDir()
	if err := os.Mkdir(filepath.Join(notAFile, "orders.db"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, dir, addr, want string
	}{
		{"the database is a directory", notAFile, "127.0.0.1:0", "orders.db"},
		{"the HTTP address is taken", t.TempDir(), taken, taken},
	} {
		s, err := open(t.Context(), c.dir, c.addr, slog.New(slog.DiscardHandler))
		if err == nil {
			s.close()
			t.Fatalf("%s: open succeeded", c.name)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: the error does not name %s: %v", c.name, c.want, err)
		}
	}
}

// FuzzDecodeOrder feeds POST /orders any body: decodeOrder either refuses
// it or returns a request within bounds that is the body's content.
func FuzzDecodeOrder(f *testing.F) {
	for _, body := range []string{
		`{"item":"vinyl","total":1999}`, `{"item":"","total":1}`, `{"item":"x","total":0}`,
		`{"item":"x","total":100000001}`, `{"item":"x","total":1.5}`, `{"item":"x","total":1}{}`,
		`{"item":"x","total":1,"extra":true}`, `{"ITEM":"x","Total":1}`, `[]`, `null`, ``,
		`{"item":"\u00e9\ud800","total":1e3}`,
	} {
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, body string) {
		req, err := decodeOrder(strings.NewReader(body))
		if err != nil {
			if req != (orderRequest{}) {
				t.Fatalf("refused %q (%v) but returned %+v", body, err, req)
			}
			return
		}
		if req.Item == "" || len(req.Item) > maxItemBytes || req.Total < 1 || req.Total > maxTotal {
			t.Fatalf("accepted %q as %+v, out of bounds", body, req)
		}
		var plain orderRequest
		if err := json.Unmarshal([]byte(body), &plain); err != nil || plain != req {
			t.Fatalf("accepted %q as %+v; encoding/json reads %+v (%v)", body, req, plain, err)
		}
	})
}

// checkBilledOnce checks that the database holds want orders and that every
// customer's account counts each of their orders once: as many orders, and
// a balance of their totals.
func checkBilledOnce(t *testing.T, db *sql.DB, want int) {
	t.Helper()
	var orders, wrong int
	err := db.QueryRow(`SELECT
		(SELECT COUNT(*) FROM orders),
		(SELECT COUNT(*) FROM (SELECT customer, COUNT(*) AS n, SUM(total) AS sum FROM orders GROUP BY customer) o
			FULL JOIN billing_accounts a USING (customer)
			WHERE a.orders IS NOT o.n OR a.balance IS NOT o.sum)`).Scan(&orders, &wrong)
	if err != nil {
		t.Fatal(err)
	}
	if orders != want {
		t.Errorf("%d orders, want %d", orders, want)
	}
	if wrong != 0 {
		rows, _ := db.Query("SELECT customer, orders, balance FROM billing_accounts")
		defer rows.Close()
		for rows.Next() {
			var c string
			var n, b int
			_ = rows.Scan(&c, &n, &b)
			t.Logf("account %s: %d orders, balance %d", c, n, b)
		}
		t.Errorf("%d accounts do not count their customer's orders once", wrong)
	}
}

// forgetBillingAcks deletes billing's durable consumer from the stopped
// service's NATS store. The next start creates it again, from the start of
// the stream: JetStream delivers every message again, as it would after
// losing acknowledgements.
func forgetBillingAcks(t *testing.T, dir string) {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{Dir: filepath.Join(dir, "nats")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := couriernats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteConsumer(t.Context(), couriernats.DefaultStream, "billing"); err != nil {
		t.Fatal(err)
	}
}

// openDB opens the database a stopped service left in dir.
func openDB(t *testing.T, dir string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(dir, "orders.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// waitFor waits until cond holds, for 30 s at most.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
