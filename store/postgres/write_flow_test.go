package postgres_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/courier-go/courier"
	couriernats "github.com/courier-go/courier/broker/nats"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/relay"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// scheduledRowSQL reads a message's rows in courier_outbox_scheduled, every
// column Go's scheduler writes, in the order they were written.
const scheduledRowSQL = `SELECT due_at, created_at, message_id, topic, ordering_key, type, version, content_type, payload,
headers, occurred_at, released_at FROM courier_outbox_scheduled WHERE message_id = $1 ORDER BY id`

// courier_schedule writes the row Go's Schedule writes; NULL arguments
// take the defaults, a NULL due time is refused.
func TestScheduleFunctionWritesGoRows(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	tx, err := pg.Pool.Begin(ctx)
	testenv.Must(t, err, "begin")
	defer tx.Rollback(ctx) //nolint:errcheck // always rolled back
	m := validMessage()
	due := time.Date(2032, 1, 2, 3, 4, 5, 678901000, time.UTC)
	var id uuid.UUID
	testenv.Must(t, tx.QueryRow(ctx, scheduleSQL, append(writeArgs(m), due)...).Scan(&id), "courier_schedule")
	// The scheduled table's message_id is unique: Go's copy goes in
	// after the function's row is read and deleted.
	fn := rows(t, tx, scheduledRowSQL, id)
	_, err = tx.Exec(ctx, "DELETE FROM courier_outbox_scheduled WHERE message_id = $1", id)
	testenv.Must(t, err, "delete")
	testenv.Must(t, outbox.New(postgres.Pgx(), outbox.Config{}).Schedule(ctx, tx, outbox.At(due), m), "Go's schedule")
	goRows := rows(t, tx, scheduledRowSQL, id)
	if !reflect.DeepEqual(fn, goRows) {
		t.Fatalf("courier_schedule's row differs from Go's:\n  %v\n  %v", fn, goRows)
	}

	// Only what is required, the rest by default: a new UUIDv7, now,
	// version 1, application/octet-stream, no headers.
	var before, after time.Time
	testenv.Must(t, tx.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&before), "clock")
	testenv.Must(t, tx.QueryRow(ctx, "SELECT courier_write('orders', 'o-1', 'OrderPlaced', NULL)").Scan(&id), "courier_write with defaults")
	testenv.Must(t, tx.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&after), "clock")
	if id.Version() != 7 || id.Variant() != uuid.RFC4122 {
		t.Fatalf("id %s is version %d, variant %s: want a UUIDv7", id, id.Version(), id.Variant())
	}
	if sec, _ := id.Time().UnixTime(); sec < before.Unix()-1 || sec > after.Unix() {
		t.Fatalf("id %s's time %d is not between the call's %s and %s", id, sec, before, after)
	}
	var (
		version  int
		ctype    string
		payload  []byte
		headers  map[string]string
		occurred time.Time
	)
	testenv.Must(t, tx.QueryRow(ctx, "SELECT version, content_type, payload, headers, occurred_at FROM courier_outbox WHERE message_id = $1", id).
		Scan(&version, &ctype, &payload, &headers, &occurred), "read the row")
	if version != 1 || ctype != courier.ContentTypeBinary || payload == nil || len(payload) != 0 || headers != nil ||
		occurred.Before(before) || occurred.After(after) {
		t.Fatalf("defaults: version %d, content type %q, payload %v, headers %v, occurred at %s (called between %s and %s)",
			version, ctype, payload, headers, occurred, before, after)
	}

	_, err = tx.Exec(ctx, "SAVEPOINT s")
	testenv.Must(t, err, "savepoint")
	err = tx.QueryRow(ctx, "SELECT courier_schedule(NULL, 'orders', 'o-1', 'OrderPlaced', NULL)").Scan(&id)
	if err == nil || !strings.Contains(err.Error(), "the due time is NULL") {
		t.Fatalf("courier_schedule without a due time: %v, want an error that says the due time is NULL", err)
	}
}

// A commit of courier_write or courier_schedule wakes an armed relay, as
// Go's inserts do.
func TestWriteFunctionsWakeTheRelay(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	n, err := postgres.NewNotifier(pg.URL, nil)
	testenv.Must(t, err, "notifier")
	nctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(nctx) }()
	defer func() { stop(); <-done }()
	select { // the listener signals once it listens
	case <-n.Wake():
	case <-time.After(10 * time.Second):
		t.Fatal("the listener did not start listening within 10s")
	}
	for _, q := range []string{
		"SELECT courier_write('orders', 'o-1', 'OrderPlaced', 'x')",
		"SELECT courier_schedule(now() + interval '1 hour', 'orders', 'o-1', 'OrderPlaced', 'x')",
	} {
		testenv.Eventually(t, 5*time.Second, func() bool { ok, err := n.Arm(ctx); return ok && err == nil }, "could not arm")
		for drained := false; !drained; {
			select {
			case <-n.Wake():
			default:
				drained = true
			}
		}
		testenv.Must(t, pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, q); return err }), q)
		select {
		case <-n.Wake():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: its commit did not wake an armed notifier", q)
		}
		testenv.Must(t, n.Disarm(ctx), "disarm")
	}
}

// Messages that courier_write and courier_schedule wrote are cancelled by
// Go's Cancel and published by Go's relay as Go's own are: ids, keys,
// types, versions, content types, payloads and headers, each key's in
// order; a scheduled one once due, occurring at its due time.
func TestWriteFunctionsFeedTheRelay(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := postgres.NewDriver(pg.Pool)
	w := outbox.New(d.Inserter(), outbox.Config{})

	var want []courier.Message
	write := func(tx pgx.Tx, m courier.Message) {
		var id uuid.UUID
		testenv.Must(t, tx.QueryRow(ctx, writeSQL, writeArgs(m)...).Scan(&id), "courier_write")
		want = append(want, m)
	}
	schedule := func(tx pgx.Tx, m courier.Message, due string) uuid.UUID {
		var id uuid.UUID
		testenv.Must(t, tx.QueryRow(ctx, "SELECT courier_schedule("+due+", $1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9)", writeArgs(m)...).Scan(&id), "courier_schedule")
		return id
	}
	later := courier.NewMessage("orders", "k", "Reminder", []byte("later"))
	soon := courier.NewMessage("orders", "k", "Reminder", []byte("soon"), courier.WithHeader("x-why", "due now"))
	testenv.Must(t, pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error {
		for i, key := range []string{"k", "j", "k", "k", "j"} {
			m := validMessage()
			m.Key, m.Payload = key, []byte{byte(i), 0, 0xff}
			write(tx, m)
		}
		schedule(tx, later, "now() + interval '1 hour'")
		schedule(tx, soon, "now()")
		return nil
	}), "write")
	soon.OccurredAt = time.Time{} // once released, it occurs at its due time
	want = append(want, soon)

	// Go's Cancel finds the message courier_schedule wrote.
	cancelIn := func(id uuid.UUID) error {
		var cerr error
		_ = pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error { cerr = w.Cancel(ctx, tx, id); return cerr })
		return cerr
	}
	testenv.Must(t, cancelIn(later.ID), "cancel the message due in an hour")
	if err := cancelIn(later.ID); !errors.Is(err, store.ErrNotScheduled) {
		t.Fatalf("cancelling it again: %v, want store.ErrNotScheduled", err)
	}

	srv := testenv.EmbeddedNATS(t)
	nc := testenv.Connect(t, srv.ClientURL())
	stream := testenv.Name("S")
	mapping := couriernats.Config{SubjectPrefix: stream + "."}
	testenv.Must(t, couriernats.EnsureStream(ctx, nc, mapping, couriernats.StreamConfig{Name: stream}), "ensure stream")
	pub, err := couriernats.NewPublisher(nc, couriernats.PublisherConfig{Config: mapping, AckTimeout: 5 * time.Second})
	testenv.Must(t, err, "publisher")
	st, err := d.RelayStore(ctx, store.RelayConfig{})
	testenv.Must(t, err, "relay store")
	r, err := relay.New(st, pub, relay.Config{PollInterval: 20 * time.Millisecond})
	testenv.Must(t, err, "relay")
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	testenv.WhileProgressing(t, 30*time.Second, func() (bool, any) {
		m := r.Metrics()
		return m.Published >= int64(len(want)), m.Published
	}, "the relay did not publish the %d messages: %+v", len(want), testenv.Lazy(func() any { return r.Metrics() }))
	stop()
	testenv.Must(t, <-done, "relay")
	if err := cancelIn(soon.ID); !errors.Is(err, store.ErrAlreadyDue) {
		t.Fatalf("cancelling the published scheduled message: %v, want store.ErrAlreadyDue", err)
	}

	got := testenv.StreamMessages(t, nc, stream, mapping)
	if len(got) != len(want) {
		t.Fatalf("the stream holds %d messages, want %d", len(got), len(want))
	}
	byID := map[uuid.UUID]courier.Message{}
	for _, m := range got {
		byID[m.ID] = m
	}
	for _, m := range want {
		g, ok := byID[m.ID]
		if !ok {
			t.Fatalf("message %s was not published", m.ID)
		}
		if m.OccurredAt.IsZero() {
			m.OccurredAt = g.OccurredAt
		}
		if len(m.Headers) == 0 {
			m.Headers = g.Headers
		}
		if !reflect.DeepEqual(g, m) {
			t.Fatalf("published\n  %+v\nwant\n  %+v", g, m)
		}
	}
	order := func(msgs []courier.Message, key string) (ids []uuid.UUID) {
		for _, m := range msgs {
			if m.Key == key {
				ids = append(ids, m.ID)
			}
		}
		return ids
	}
	for _, key := range []string{"k", "j"} {
		if g, w := order(got, key), order(want, key); !reflect.DeepEqual(g, w) {
			t.Fatalf("key %s published in the order %v, written %v", key, g, w)
		}
	}
}

// A transaction that writes one message, with headers: through Go's
// outbox.Writer, and through courier_write as another language calls it.
// The difference is the function's checks and its call.
func BenchmarkWriteFunction(b *testing.B) {
	pg := testenv.Postgres(b, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	w := outbox.New(postgres.Pgx(), outbox.Config{})
	for _, bc := range []struct {
		name  string
		write func(tx pgx.Tx, m courier.Message) error
	}{
		{"go", func(tx pgx.Tx, m courier.Message) error { return w.Write(ctx, tx, m) }},
		{"courier_write", func(tx pgx.Tx, m courier.Message) error {
			_, err := tx.Exec(ctx, writeSQL, writeArgs(m)...)
			return err
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				m := validMessage()
				testenv.Must(b, pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error { return bc.write(tx, m) }), "write")
			}
		})
	}
}
