package postgres_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courier-go/courier"
	"github.com/courier-go/courier/internal/testenv"
	"github.com/courier-go/courier/outbox"
	"github.com/courier-go/courier/store"
	"github.com/courier-go/courier/store/postgres"
)

// Format 1 of LogOnly's encoding is what relays of every version read:
// its bytes stay those it has always had.
func TestLogMessageFormat1(t *testing.T) {
	m := courier.Message{ID: uuid.MustParse("0192f3a4-0000-7000-8000-000000000001"), Topic: "orders", Key: "order-42", Type: "OrderPlaced",
		Version: 3, ContentType: "application/json", Payload: []byte(`{"total":12}`), Headers: map[string]string{"b": "2", "a": "1"},
		OccurredAt: time.Date(2026, 11, 30, 17, 0, 0, 123456000, time.UTC)}
	const golden = "010192f3a40000700080000000000000018099bff1aae0b00603066f7264657273086f726465722d34320b4f72646572506c61636564" +
		"106170706c69636174696f6e2f6a736f6e0201610131016201327b22746f74616c223a31327d"
	b, err := hex.DecodeString(golden)
	if err != nil {
		t.Fatal(err)
	}
	got, err := postgres.DecodeLogMessage(b)
	if err != nil || !sameLogMessage(got, m) {
		t.Fatalf("format 1 decodes to %+v, %v; want %+v", got, err, m)
	}
	if enc := postgres.EncodeLogMessage(nil, &m); enc[0] == 1 && !bytes.Equal(enc, b) {
		t.Fatalf("format 1 encodes to\n%x\nwant\n%x", enc, b)
	}
}

// A message survives LogOnly's encoding field for field; a damaged or
// unknown encoding is refused with what is wrong.
func TestLogMessageEncoding(t *testing.T) {
	at := time.Date(2026, 11, 30, 17, 0, 0, 123456000, time.UTC)
	for _, m := range []courier.Message{
		courier.NewMessage("orders", "order-42", "OrderPlaced", []byte(`{"total":12}`), courier.WithOccurredAt(at), courier.WithVersion(3)),
		{ID: uuid.Must(uuid.NewV7()), Topic: "t", Key: "", Type: "T", Version: 1, ContentType: courier.ContentTypeBinary,
			Payload: []byte{0, 1, 2}, Headers: map[string]string{"b": "2", "a": "1", "traceparent": "00-x"}, OccurredAt: at},
	} {
		b := postgres.EncodeLogMessage(nil, &m)
		got, err := postgres.DecodeLogMessage(b)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if got.ID != m.ID || got.Topic != m.Topic || got.Key != m.Key || got.Type != m.Type || got.Version != m.Version ||
			got.ContentType != m.ContentType || string(got.Payload) != string(m.Payload) || !got.OccurredAt.Equal(m.OccurredAt.Truncate(time.Microsecond)) ||
			len(got.Headers) != len(m.Headers) {
			t.Fatalf("decoded %+v, want %+v", got, m)
		}
		for k, v := range m.Headers {
			if got.Headers[k] != v {
				t.Fatalf("header %s = %q, want %q", k, got.Headers[k], v)
			}
		}
		if again := postgres.EncodeLogMessage(nil, &got); string(again) != string(b) {
			t.Fatal("the encoding is not deterministic")
		}
		for cut := 1; cut < len(b)-len(m.Payload); cut++ {
			if _, err := postgres.DecodeLogMessage(b[:cut]); err == nil {
				t.Fatalf("a message cut at byte %d of %d decoded", cut, len(b))
			}
		}
		b[0] = 9
		if _, err := postgres.DecodeLogMessage(b); err == nil || !strings.Contains(err.Error(), "format 9") {
			t.Fatalf("format 9: %v", err)
		}
	}
}

// The prefix of a table-less message names the courier_outbox that the
// writing statement's search_path resolves, by its OID: two schemas'
// outboxes write two prefixes. LogOnly and QueueLogMessages write the same
// messages; QueueLogMessages queues nothing for an invalid message and
// its statement fails as LogOnly's Insert does without the table.
func TestLogMessagePrefix(t *testing.T) {
	ctx := context.Background()
	a := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	b := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	oid := func(pool *pgxpool.Pool) string {
		var o uint32
		testenv.Must(t, pool.QueryRow(ctx, "SELECT "+postgres.LogTableSQL).Scan(&o), "oid")
		return strconv.FormatUint(uint64(o), 10)
	}
	oidA, oidB := oid(a.Pool), oid(b.Pool)
	if oidA == oidB {
		t.Fatalf("both schemas' courier_outbox have OID %s", oidA)
	}

	// A test_decoding slot (not temporary: LogOnly does not count those).
	conn, err := a.Admin.Acquire(ctx)
	testenv.Must(t, err, "acquire")
	defer conn.Release()
	slot := strings.ToLower(testenv.Name("p_"))
	_, err = conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'test_decoding')", slot)
	testenv.Must(t, err, "create slot")
	defer func() { _, _ = conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot) }()

	inA := courier.NewMessage("events", "k", "T", []byte("a"))
	inB := []courier.Message{courier.NewMessage("events", "k", "T", []byte("b1")), courier.NewMessage("events", "k", "T", []byte("b2"))}
	lw := outbox.New(postgres.LogOnly(), outbox.Config{})
	testenv.Must(t, pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error { return lw.Write(ctx, tx, inA) }), "write to a")
	_, err = b.Pool.Exec(ctx, "CREATE TABLE orders (id int)")
	testenv.Must(t, err, "orders")
	testenv.Must(t, pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
		var batch pgx.Batch
		batch.Queue("INSERT INTO orders VALUES (1)")
		if err := postgres.QueueLogMessages(&batch, courier.Limits{}, inB...); err != nil {
			return err
		}
		return tx.SendBatch(ctx, &batch).Close()
	}), "queue to b")

	rows, err := conn.Query(ctx, `SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL) WHERE substr(data, 1, 8) = 'message:'::bytea`, slot)
	testenv.Must(t, err, "peek")
	datas, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	testenv.Must(t, err, "peek")
	got := map[string][]string{} // prefix → payloads
	for _, d := range datas {
		// message: transactional: 1 prefix: P, sz: N content:C
		_, rest, _ := bytes.Cut(d, []byte("prefix: "))
		prefix, rest, _ := bytes.Cut(rest, []byte(", sz: "))
		_, content, _ := bytes.Cut(rest, []byte("content:"))
		if !bytes.HasPrefix(prefix, []byte(postgres.LogPrefix)) {
			continue
		}
		m, err := postgres.DecodeLogMessage(content)
		testenv.Must(t, err, "decode "+string(prefix))
		got[string(prefix)] = append(got[string(prefix)], string(m.Payload))
	}
	want := map[string][]string{postgres.LogPrefix + oidA: {"a"}, postgres.LogPrefix + oidB: {"b1", "b2"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("messages by prefix %v, want %v", got, want)
	}

	var batch pgx.Batch
	bad := courier.NewMessage("", "k", "T", nil)
	if err := postgres.QueueLogMessages(&batch, courier.Limits{}, inA, bad); err == nil || !strings.Contains(err.Error(), "message 2 of 2") || batch.Len() != 0 {
		t.Fatalf("an invalid message: %v, %d queued; want its error and nothing queued", err, batch.Len())
	}
	none := testenv.Postgres(t, nil)
	err = pgx.BeginFunc(ctx, none.Pool, func(tx pgx.Tx) error {
		var batch pgx.Batch
		testenv.Must(t, postgres.QueueLogMessages(&batch, courier.Limits{}, inA), "queue")
		return tx.SendBatch(ctx, &batch).Close()
	})
	if !errors.Is(err, store.ErrSchemaOutdated) {
		t.Fatalf("without courier_outbox: %v, want ErrSchemaOutdated", err)
	}
}

// The check that a logical slot exists runs on a session's first write,
// then at most once a minute: a write right after the only slot was
// dropped still succeeds, one whose session last checked long ago fails.
// Each error says which of wal_level and the slot is missing. LogOnly and
// QueueLogMessages share the check.
func TestLogOnlySlotCheck(t *testing.T) {
	ctx := context.Background()
	queue := func(pool *pgxpool.Pool) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var batch pgx.Batch
			testenv.Must(t, postgres.QueueLogMessages(&batch, courier.Limits{}, courier.NewMessage("events", "k", "T", nil)), "queue")
			return tx.SendBatch(ctx, &batch).Close()
		})
	}
	lw := outbox.New(postgres.LogOnly(), outbox.Config{})
	write := func(pool *pgxpool.Pool) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return lw.Write(ctx, tx, courier.NewMessage("events", "k", "T", nil)) })
	}
	// open returns a pool of one connection (one session) on a fresh
	// server with settings.
	open := func(settings ...string) *pgxpool.Pool {
		srv := testenv.StartPostgres(t, settings...)
		cfg, err := pgxpool.ParseConfig(srv.URL)
		testenv.Must(t, err, "parse")
		cfg.MaxConns = 1
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		testenv.Must(t, err, "pool")
		t.Cleanup(pool.Close)
		_, err = postgres.NewDriver(pool).Migrate(ctx)
		testenv.Must(t, err, "migrate")
		return pool
	}
	wantNoSlot := func(what string, err error, fix string) {
		t.Helper()
		if !errors.Is(err, postgres.ErrNoLogicalSlot) || !strings.Contains(err.Error(), fix) {
			t.Fatalf("%s: %v, want ErrNoLogicalSlot saying %q", what, err, fix)
		}
	}

	pool := open()
	wantNoSlot("first write without a slot", write(pool), "start the CDC relay")
	wantNoSlot("queued without a slot", queue(pool), "start the CDC relay")
	// A temporary slot (the one a relay reads while it makes its slot)
	// goes with its session: it does not count.
	temp, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	testenv.Must(t, err, "connect")
	_, err = temp.Exec(ctx, "SELECT pg_create_logical_replication_slot('t', 'pgoutput', true)")
	testenv.Must(t, err, "create temporary slot")
	wantNoSlot("write with only a temporary slot", write(pool), "start the CDC relay")
	testenv.Must(t, temp.Close(ctx), "close")
	_, err = pool.Exec(ctx, "SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
	testenv.Must(t, err, "create slot")
	testenv.Must(t, write(pool), "write with a slot")
	_, err = pool.Exec(ctx, "SELECT pg_drop_replication_slot('s')")
	testenv.Must(t, err, "drop slot")
	testenv.Must(t, write(pool), "write within a minute of the check")
	testenv.Must(t, queue(pool), "queued within a minute of the check")
	_, err = pool.Exec(ctx, "SELECT set_config('courier.log_checked', '000000000000', false)")
	testenv.Must(t, err, "age the check")
	wantNoSlot("write a minute after the check", write(pool), "start the CDC relay")
	wantNoSlot("queued a minute after the check", queue(pool), "start the CDC relay")

	wantNoSlot("wal_level replica", write(open("wal_level=replica")), "wal_level is replica")
}

// The decoder of the log tells the relay of each scheduled message written
// (an insert into courier_outbox_scheduled, which the publication Setup
// makes carries), without taking it for a message to publish.
func TestDecoderSeesScheduled(t *testing.T) {
	pg := testenv.Postgres(t, testenv.Migrate(postgres.NewDriver))
	ctx := context.Background()
	var level string
	testenv.Must(t, pg.Pool.QueryRow(ctx, "SHOW wal_level").Scan(&level), "wal_level")
	if level != "logical" {
		t.Fatalf("wal_level is %s: the test needs logical (.ci/run sets it)", level)
	}
	d := postgres.NewDriver(pg.Pool)
	slot := strings.ToLower(testenv.Name("dec_"))
	testenv.Must(t, d.CDC().Setup(ctx, slot), "publication")
	_, err := pg.Admin.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot)
	testenv.Must(t, err, "slot")
	t.Cleanup(func() {
		_, _ = pg.Admin.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", slot)
		_, _ = pg.Admin.Exec(context.Background(), "DROP PUBLICATION IF EXISTS "+slot)
	})
	w := outbox.New(d.Inserter(), outbox.Config{})
	row, later := courier.NewMessage("t", "k", "T", []byte("now")), courier.NewMessage("t", "k", "T", []byte("later"))
	testenv.Must(t, d.InTx(ctx, func(tx pgx.Tx) error {
		if err := w.Write(ctx, tx, row); err != nil {
			return err
		}
		return w.Schedule(ctx, tx, outbox.After(time.Hour), later)
	}), "write")
	dec, err := d.CDC().Decoder(ctx)
	testenv.Must(t, err, "decoder")
	rows, err := pg.Pool.Query(ctx, `SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
    'proto_version', '1', 'publication_names', $2, 'binary', 'true', 'messages', 'true')`, slot, slot)
	testenv.Must(t, err, "read the slot")
	var kinds []store.LogEventKind
	for rows.Next() {
		var data []byte
		testenv.Must(t, rows.Scan(&data), "scan")
		ev, err := dec.Decode(data)
		testenv.Must(t, err, "decode")
		if ev.Kind != store.LogNone {
			kinds = append(kinds, ev.Kind)
		}
		if ev.Kind == store.LogMessage && ev.Item.Message.ID != row.ID {
			t.Fatalf("decoded message %s, want only the row written now", ev.Item.Message.Payload)
		}
	}
	testenv.Must(t, rows.Err(), "rows")
	want := []store.LogEventKind{store.LogBegin, store.LogMessage, store.LogScheduled, store.LogCommit}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Fatalf("decoded %v, want %v (begin, the row, the scheduled one, commit)", kinds, want)
	}
}
