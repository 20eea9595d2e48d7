package webhook_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/broker/webhook"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/sqlite"
)

func openSQLite(t *testing.T, name string) *sql.DB {
	t.Helper()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := sqlite.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return db
}

// The whole path: outbox rows on SQLite, the relay publishing them through
// webhooks to an endpoint that answers 30% of requests 503, a Handler
// feeding an inbox consumer on another SQLite database; one answer in ten
// of those it passes on is lost after the consumer applied the message, so
// the message comes again. Every message is
// applied exactly once and each key's messages in the order written.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end")
	}
	const keys, perKey = 8, 25
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	secret := newSecret(t)

	// Consumer side.
	cdb := openSQLite(t, "consumer.db")
	if _, err := cdb.Exec("CREATE TABLE applied (id TEXT PRIMARY KEY, k TEXT NOT NULL, n INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	h, err := webhook.NewHandler(webhook.HandlerConfig{VerifierConfig: webhook.VerifierConfig{Secrets: []string{secret}}, Wait: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var requests, refused, lost atomic.Int64
	var mu = make(chan struct{}, 1)
	rng := rand.New(rand.NewPCG(1, 2))
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		mu <- struct{}{}
		fail, lose := rng.Float64() < 0.3, rng.Float64() < 0.1
		<-mu
		if fail {
			refused.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if lose { // applied, but the answer is lost: the message comes again
			h.ServeHTTP(httptest.NewRecorder(), r)
			lost.Add(1)
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer flaky.Close()
	d := sqlite.NewDriver(cdb)
	ib, err := inbox.New(d.Inbox(), "webhook-e2e")
	if err != nil {
		t.Fatal(err)
	}
	apply := func(ctx context.Context, tx *sql.Tx, m courier.Message) error {
		var n int
		if _, err := fmt.Sscan(string(m.Payload), &n); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO applied (id, k, n) VALUES (?, ?, ?)", m.ID.String(), m.Key, n)
		return err
	}
	cons, err := inbox.NewConsumer(ib, h, d.ConsumerStore(), apply, inbox.ConsumerConfig{KeepOrder: true, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	consDone := make(chan error, 1)
	consCtx, stopCons := context.WithCancel(ctx)
	go func() { consDone <- cons.Run(consCtx) }()

	// Producer side.
	pdb := openSQLite(t, "producer.db")
	st, err := sqlite.NewDriver(pdb).RelayStore(ctx, store.RelayConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pub := newPublisher(t, webhook.PublisherConfig{
		Endpoints: map[string]string{"orders": flaky.URL},
		Secrets:   []string{secret},
		Timeout:   5 * time.Second,
		Breaker:   webhook.BreakerConfig{Failures: 5, OpenFor: 100 * time.Millisecond},
	})
	r, err := relay.New(st, pub, relay.Config{
		BatchSize: 50, PollInterval: 20 * time.Millisecond,
		Backoff: relay.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond, Jitter: 0.2},
	})
	if err != nil {
		t.Fatal(err)
	}
	relayDone := make(chan error, 1)
	relayCtx, stopRelay := context.WithCancel(ctx)
	go func() { relayDone <- r.Run(relayCtx) }()

	w := outbox.New(sqlite.DatabaseSQL(), outbox.Config{})
	for n := range perKey {
		tx, err := pdb.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k := range keys {
			m := courier.NewMessage("orders", fmt.Sprintf("key-%d", k), "Counted", []byte(fmt.Sprint(n)))
			if err := w.Write(ctx, tx, m); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}

	const total = keys * perKey
	for {
		var n int
		if err := cdb.QueryRowContext(ctx, "SELECT COUNT(*) FROM applied").Scan(&n); err != nil {
			t.Fatal(err)
		}
		// Applied is not yet published: a message whose answer was lost is
		// applied, but its outbox row waits for the relay's retry.
		var pending int
		if err := pdb.QueryRowContext(ctx, "SELECT COUNT(*) FROM courier_outbox").Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if n >= total && pending == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of %d messages applied, %d outbox rows pending in time (%d requests, %d refused)", n, total, pending, requests.Load(), refused.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopRelay()
	if err := <-relayDone; err != nil {
		t.Fatalf("relay: %v", err)
	}
	stopCons()
	if err := <-consDone; err != nil {
		t.Fatalf("consumer: %v", err)
	}
	_ = h.Close()

	rows, err := cdb.Query("SELECT k, n FROM applied ORDER BY rowid")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	next := map[string]int{}
	count := 0
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		if n != next[k] {
			t.Fatalf("key %s: message %d applied when %d was due", k, n, next[k])
		}
		next[k]++
		count++
	}
	if count != total {
		t.Fatalf("%d messages applied, want %d exactly once each", count, total)
	}
	for _, q := range []struct {
		db    *sql.DB
		table string
	}{{pdb, "courier_outbox_dead_letters"}, {pdb, "courier_outbox"}, {cdb, "courier_inbox_dead_letters"}} {
		var n int
		if err := q.db.QueryRow("SELECT COUNT(*) FROM " + q.table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			t.Errorf("%s holds %d rows, want none", q.table, n)
		}
	}
	m := r.Metrics()
	t.Logf("%d messages applied once each in key order; %d requests, %d refused with 503, %d answers lost; relay %+v; consumer %+v",
		count, requests.Load(), refused.Load(), lost.Load(), m, cons.Metrics())
	if refused.Load() == 0 || cons.Metrics().Duplicates == 0 {
		t.Fatal("the endpoint refused nothing or no message came twice: the test tested no failure")
	}
}
