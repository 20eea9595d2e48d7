package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"database/sql"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/inbox"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store/sqlite"
)

// parkedInsert seeds a parked delivery of consumer "billing" with the given
// message id and type; its payload says whether the handler succeeds.
func parkedInsert(t *testing.T, db *sql.DB, id int, msgID, typ, payload string) {
	t.Helper()
	headers := fmt.Sprintf(`{"Nats-Msg-Id":[%q],"Courier-Key":["k"],"Courier-Type":[%q],"Courier-Version":["1"],"Courier-Occurred-At":["2026-11-29T10:00:00Z"]}`, msgID, typ)
	if msgID == "" {
		headers = fmt.Sprintf(`{"Courier-Key":["k"],"Courier-Type":[%q],"Courier-Version":["1"],"Courier-Occurred-At":["2026-11-29T10:00:00Z"]}`, typ)
	}
	_, err := db.Exec(`INSERT INTO courier_inbox_dead_letters (id, consumer, message_id, subject, headers, payload, reason, last_error, attempts, parked_at)
VALUES (?, 'billing', ?, 'courier.payments', ?, ?, 'failed', 'card declined', 5, ?)`, id, msgID, headers, payload, time.Now().UnixMicro())
	testenv.Must(t, err, "seed parked delivery")
}

// dlq replay --wait reports what a running consumer did with each replay:
// applied, failed again, or nothing (no consumer running).
func TestDLQReplayWaitConsumer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "billing.db")
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open")
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err = sqlite.Migrate(ctx, db)
	testenv.Must(t, err, "migrate")
	parkedInsert(t, db, 1, "01939f3a-0000-7000-8000-000000000011", "ChargeRequested", "ok")
	parkedInsert(t, db, 2, "01939f3a-0000-7000-8000-000000000012", "ChargeRequested", "fail")
	parkedInsert(t, db, 3, "", "ChargeRequested", "ok") // malformed: no Nats-Msg-Id
	parkedInsert(t, db, 4, "01939f3a-0000-7000-8000-000000000014", "ChargeRequested", "ok")
	url := "sqlite://" + path

	// No consumer runs yet: the wait ends without an outcome, and the
	// request stands (the consumer started below applies it).
	code, out, errOut := runCLI(t, "dlq", "replay", "consumer:4", "--wait", "300ms", "--database-url", url)
	if code != 1 || !strings.Contains(out, "not applied after 300ms: is consumer billing running?") {
		t.Fatalf("replay --wait without a consumer: %d %q %q", code, out, errOut)
	}

	srv := testenv.EmbeddedNATS(t)
	nc := testenv.Connect(t, srv.ClientURL())
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, couriernats.Config{}, couriernats.StreamConfig{}), "stream")
	sub, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{Consumer: "billing"})
	testenv.Must(t, err, "subscriber")
	ib, err := inbox.New(sqlite.NewDriver(db).Inbox(), "billing")
	testenv.Must(t, err, "inbox")
	r := inbox.NewRouter[*sql.Tx]()
	r.Handle("ChargeRequested", func(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
		if string(msg.Payload) == "fail" {
			return errors.New("card still declined")
		}
		return nil
	})
	c, err := inbox.NewConsumer(ib, sub, sqlite.NewDriver(db).ConsumerStore(), r.Handler(), inbox.ConsumerConfig{ReplayEvery: 100 * time.Millisecond})
	testenv.Must(t, err, "consumer")
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	code, out, errOut = runCLI(t, "dlq", "replay", "consumer:1", "consumer:2", "--wait", "10s", "--database-url", url)
	if code != 1 || !strings.Contains(out, "consumer:1       applied by consumer billing") ||
		!strings.Contains(out, "consumer:2       replay failed, still parked: card still declined") || !strings.Contains(errOut, "1 of 2 replay(s) did not succeed") {
		t.Fatalf("replay --wait with a consumer: %d\n%s%s", code, out, errOut)
	}

	// A letter without a message id would fail again: the replay is
	// refused until --new-id gives it one.
	code, _, errOut = runCLI(t, "dlq", "replay", "consumer:3", "--database-url", url)
	if code != 1 || !strings.Contains(errOut, "consumer:3 has no message id") || !strings.Contains(errOut, "--new-id") {
		t.Fatalf("replay of a letter without a message id: %d %q", code, errOut)
	}
	if code, _, errOut = runCLI(t, "dlq", "replay", "consumer:2", "--new-id", "--database-url", url); code != 1 || !strings.Contains(errOut, "has a message id already") {
		t.Fatalf("--new-id on a letter with an id: %d %q", code, errOut)
	}
	code, out, errOut = runCLI(t, "dlq", "replay", "consumer:3", "--new-id", "--wait", "10s", "--database-url", url)
	if code != 0 || !strings.Contains(out, "consumer:3       applied by consumer billing") {
		t.Fatalf("replay --new-id: %d\n%s%s", code, out, errOut)
	}
}

// dlq replay --wait follows a relay-side replay until a running relay
// published it, or it became a dead letter again.
func TestDLQReplayWaitRelay(t *testing.T) {
	d := dlqDatabases(t)["sqlite"](t)
	for _, q := range d.seed {
		_, err := d.db.Exec(q)
		testenv.Must(t, err, "seed dead letters")
	}
	// A second letter on a topic no stream binds fails again.
	_, err := d.db.Exec(`INSERT INTO courier_outbox_dead_letters
    (id, message_id, topic, ordering_key, type, version, content_type, payload, occurred_at, created_at, attempts, last_error, dead_at)
VALUES (42, '01939f3a-0000-7000-8000-000000000042', 'nowhere', 'k', 'Lost', 1, '', 'x', 0, 0, 1, 'no stream', 0)`)
	testenv.Must(t, err, "seed unbound letter")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	srv := testenv.EmbeddedNATS(t)
	nc := testenv.Connect(t, srv.ClientURL())
	mapping := couriernats.Config{SubjectPrefix: "orders-only."}
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Subjects: []string{"orders-only.orders"}}), "stream")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping})
	testenv.Must(t, err, "publisher")
	st, err := sqlite.NewStore(ctx, d.db, sqlite.StoreConfig{})
	testenv.Must(t, err, "store")
	r, err := relay.New(st, pub, relay.Config{MaxAttempts: 1, PollInterval: 50 * time.Millisecond})
	testenv.Must(t, err, "relay")
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	code, out, errOut := runCLI(t, "dlq", "replay", "relay:41", "relay:42", "--wait", "10s", "--database-url", d.url)
	if code != 1 || !strings.Contains(out, "relay:41         published") || !strings.Contains(out, "relay:42         dead again: ") {
		t.Fatalf("replay --wait with a relay: %d\n%s%s", code, out, errOut)
	}
}

// A message parked because it was newer than its consumer knew
// (newer_version) is listed with that reason, and applied by `dlq replay`
// once the consumer that knows its version runs; replayed to one that
// still does not, it stays parked, saying why.
func TestDLQReplayNewerVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "billing.db")
	db, err := sqlite.Open(path)
	testenv.Must(t, err, "open")
	defer db.Close()
	ctx := context.Background()
	_, err = sqlite.Migrate(ctx, db)
	testenv.Must(t, err, "migrate")
	headers := `{"Nats-Msg-Id":["01939f3a-0000-7000-8000-000000000021"],"Courier-Key":["k"],"Courier-Type":["ChargeRequested"],"Courier-Version":["2"],"Courier-Occurred-At":["2026-11-29T10:00:00Z"]}`
	_, err = db.Exec(`INSERT INTO courier_inbox_dead_letters (id, consumer, message_id, subject, headers, payload, reason, last_error, attempts, parked_at)
VALUES (1, 'billing', '01939f3a-0000-7000-8000-000000000021', 'courier.payments', ?, '{}', 'newer_version',
        'courier: message version newer than the consumer knows: ChargeRequested version 2; this consumer knows versions [1]', 12, ?)`, headers, time.Now().UnixMicro())
	testenv.Must(t, err, "seed parked delivery")
	url := "sqlite://" + path
	if code, out, errOut := runCLI(t, "dlq", "list", "--database-url", url); code != 0 || !strings.Contains(out, "newer_version") {
		t.Fatalf("dlq list: %d\n%s%s", code, out, errOut)
	}

	srv := testenv.EmbeddedNATS(t)
	nc := testenv.Connect(t, srv.ClientURL())
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, couriernats.Config{}, couriernats.StreamConfig{}), "stream")
	var mu sync.Mutex
	var applied []int
	run := func(knows ...int) (stop func()) {
		sub, err := couriernats.NewSubscriber(ctx, nc, couriernats.SubscriberConfig{Consumer: "billing"})
		testenv.Must(t, err, "subscriber")
		ib, err := inbox.New(sqlite.NewDriver(db).Inbox(), "billing")
		testenv.Must(t, err, "inbox")
		r := inbox.NewRouter[*sql.Tx]()
		for _, v := range knows {
			r.HandleVersion("ChargeRequested", v, func(ctx context.Context, tx *sql.Tx, msg courier.Message) error {
				mu.Lock()
				defer mu.Unlock()
				applied = append(applied, msg.Version)
				return nil
			})
		}
		c, err := inbox.NewConsumer(ib, sub, sqlite.NewDriver(db).ConsumerStore(), r.Handler(), inbox.ConsumerConfig{ReplayEvery: 100 * time.Millisecond})
		testenv.Must(t, err, "consumer")
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(cctx) }()
		return func() { cancel(); <-done; _ = sub.Close() }
	}

	stop := run(1)
	code, out, errOut := runCLI(t, "dlq", "replay", "consumer:1", "--wait", "10s", "--database-url", url)
	stop()
	if code != 1 || !strings.Contains(out, "replay failed, still parked") || !strings.Contains(out, "ChargeRequested version 2") {
		t.Fatalf("replay to the consumer that knows version 1 only: %d\n%s%s", code, out, errOut)
	}
	stop = run(1, 2)
	defer stop()
	code, out, errOut = runCLI(t, "dlq", "replay", "consumer:1", "--wait", "10s", "--database-url", url)
	mu.Lock()
	defer mu.Unlock()
	if code != 0 || !strings.Contains(out, "consumer:1       applied by consumer billing") || len(applied) != 1 || applied[0] != 2 {
		t.Fatalf("replay after the deploy: %d, applied %v\n%s%s", code, applied, out, errOut)
	}
}
